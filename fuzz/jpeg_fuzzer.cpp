// JPEG files (libjpeg-turbo), decoded at 1/1 to 1/8 scale.
#include "image_fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hotloop::fuzz::decode_image(data, size, "input.jpg");
  return 0;
}
