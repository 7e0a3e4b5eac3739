include("${HOTLOOP_REAL_TORCH_DIR}/TorchConfigVersion.cmake")
