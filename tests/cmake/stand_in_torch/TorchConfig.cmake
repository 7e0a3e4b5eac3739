# A stand-in for a LibTorch package whose targets' link interface names a
# target that try_compile cannot carry into its scratch project, as the
# CUDA wheel's torch_cpu names protobuf::libprotobuf: this machine's real
# LibTorch (HOTLOOP_REAL_TORCH_DIR) with one such dependency added, an
# imported target of this project linked only through $<LINK_ONLY:...>.
# hotloop must configure against it with every process group and probe it
# configures against the real one (tests/cmake/probe_package.cmake).
if(NOT HOTLOOP_REAL_TORCH_DIR)
  message(FATAL_ERROR "stand-in Torch: set HOTLOOP_REAL_TORCH_DIR")
endif()
include("${HOTLOOP_REAL_TORCH_DIR}/TorchConfig.cmake")
if(NOT TARGET hotloop_stand_in::dependency)
  add_library(hotloop_stand_in_dependency INTERFACE IMPORTED)
  add_library(hotloop_stand_in::dependency ALIAS hotloop_stand_in_dependency)
endif()
set_property(TARGET torch_cpu APPEND PROPERTY
  INTERFACE_LINK_LIBRARIES hotloop_stand_in::dependency)
