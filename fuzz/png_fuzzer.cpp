// PNG files (libpng), grey or colour, any size.
#include "image_fuzzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hotloop::fuzz::decode_image(data, size, "input.png");
  return 0;
}
