# The compress area (pruning, structural shrinking, quantization): its
# sources, and the command line's pruning section, added to the library by
# the top-level CMakeLists.txt.
target_sources(hotloop PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/detail/int8_checkpoint.cpp
  ${CMAKE_CURRENT_LIST_DIR}/detail/module_access.cpp
  ${CMAKE_CURRENT_LIST_DIR}/detail/quantized_ops.cpp
  ${CMAKE_CURRENT_LIST_DIR}/detail/quantized_weights.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dynamic_linear.cpp
  ${CMAKE_CURRENT_LIST_DIR}/fake_quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/forward_tensor.cpp
  ${CMAKE_CURRENT_LIST_DIR}/model_pruning.cpp
  ${CMAKE_CURRENT_LIST_DIR}/observer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/parametrization.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pruning_amount.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pruning_method.cpp
  ${CMAKE_CURRENT_LIST_DIR}/prune.cpp
  ${CMAKE_CURRENT_LIST_DIR}/qat.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantization_aware_training.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantize.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantized_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantized_gpt.cpp
  ${CMAKE_CURRENT_LIST_DIR}/quantized_net.cpp
  ${CMAKE_CURRENT_LIST_DIR}/shrink.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../cli/compress_commands.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../cli/pruning_config.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../cli/quantization_config.cpp
)
