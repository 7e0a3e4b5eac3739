// A CSV table: header, delimiter found, label column, classes or numbers.
#include "fuzz_input.h"

#include "hotloop/data/csv_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks how the rest is read, as the CLI's options may.
  const uint8_t mode = size > 0 ? data[0] : 0;
  const size_t skip = size > 0 ? 1 : 0;
  const std::string path =
      hotloop::fuzz::write_input(data + skip, size - skip, "input.csv");
  hotloop::fuzz::expect_clean([&] {
    auto options = hotloop::data::CsvDatasetOptions()
                       .delimiter('\0')
                       .regression((mode & 1) != 0)
                       .header((mode & 2) == 0);
    if ((mode & 4) != 0 && options.header()) {
      options.label_column("label").label_optional((mode & 8) != 0);
    }
    if ((mode & 16) != 0) {
      options.classes({"a", "b", "0"});
    }
    const hotloop::data::CsvDataset table(path, options);
    if (table.size() > 0) {
      table.get(table.size() - 1, {});
    }
  });
  return 0;
}
