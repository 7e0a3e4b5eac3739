#pragma once

// PNG and JPEG files as an image folder reads them: decoded (JPEG at a DCT
// scale when the crop allows), cropped, resized, normalized.

#include "fuzz_input.h"

#include "hotloop/data/image_folder.h"

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace hotloop::fuzz {

/// Decodes one input as the file `name` of a one-class folder of its own:
/// in colour with a random resized crop, and grey with a center crop.
inline void decode_image(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path =
      write_input(data, size, "images_" + name + "/class/" + name);
  // Built once per name: a folder holds the path and decodes the file on
  // every get.
  static std::map<std::string, std::pair<std::shared_ptr<data::ImageFolder>,
                                         std::shared_ptr<data::ImageFolder>>>
      folders;
  auto& folder = folders[name];
  std::shared_ptr<data::ImageFolder>& colour = folder.first;
  std::shared_ptr<data::ImageFolder>& gray = folder.second;
  if (colour == nullptr) {
    const std::string root =
        std::filesystem::path(path).parent_path().parent_path().string();
    colour = std::make_shared<data::ImageFolder>(
        root, data::ImageFolderOptions({24, 20}).crop("random_resized_crop"));
    gray = std::make_shared<data::ImageFolder>(
        root, data::ImageFolderOptions({8, 8}).channels(1).crop("center_crop"));
  }
  const uint64_t seed = size > 0 ? data[size / 2] : 0;
  expect_clean([&] { colour->get(0, data::SampleContext{seed, 0}); });
  expect_clean([&] { gray->get(0, data::SampleContext{seed, 1}); });
}

} // namespace hotloop::fuzz
