#include "hotloop/cli/app.h"

int main(int argc, char** argv) {
  return hotloop::cli::main(argc, argv);
}
