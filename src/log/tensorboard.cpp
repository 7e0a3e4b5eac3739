#include "hotloop/log/tensorboard.h"

#include "hotloop/core/error.h"

#include <ATen/ATen.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace hotloop::log {
namespace {

// Field numbers of the messages written here, from tensorboard's
// compat/proto/{event,summary,histogram,tensor,tensor_shape,types}.proto,
// plugins/hparams/{api,plugin_data}.proto and google/protobuf/struct.proto.
namespace event_pb {
enum : int {
  kWallTime = 1,
  kStep = 2,
  kFileVersion = 3,
  kSummary = 5,
  kSessionLog = 7,
};
}
namespace session_log_pb {
enum : int { kStatus = 1 };
constexpr int64_t kStart = 1;
} // namespace session_log_pb
namespace summary_pb {
enum : int { kValue = 1 };
}
namespace value_pb { // Summary.Value
enum : int {
  kTag = 1,
  kSimpleValue = 2,
  kImage = 4,
  kHisto = 5,
  kTensor = 8,
  kMetadata = 9
};
}
namespace image_pb { // Summary.Image
enum : int { kHeight = 1, kWidth = 2, kColorspace = 3, kEncoded = 4 };
}
namespace histogram_pb { // HistogramProto
enum : int {
  kMin = 1,
  kMax = 2,
  kNum = 3,
  kSum = 4,
  kSumSquares = 5,
  kBucketLimit = 6,
  kBucket = 7
};
}
namespace metadata_pb { // SummaryMetadata and its PluginData
enum : int { kPluginData = 1, kPluginName = 1, kContent = 2 };
}
namespace tensor_pb { // TensorProto, TensorShapeProto and its Dim
enum : int { kDtype = 1, kShape = 2, kStringVal = 8, kDim = 2, kDimSize = 1 };
constexpr uint64_t kDtString = 7; // DataType DT_STRING
} // namespace tensor_pb
namespace hparams_pb { // plugins/hparams
enum : int {
  kPluginExperiment = 2, // HParamsPluginData.data
  kPluginSessionStart = 3,
  kPluginSessionEnd = 4,
  kExperimentHParamInfos = 4,
  kExperimentMetricInfos = 5,
  kHParamInfoName = 1,
  kHParamInfoType = 4,
  kMetricInfoName = 1,
  kMetricNameTag = 2,
  kSessionStartHParams = 1, // map<string, google.protobuf.Value>
  kMapKey = 1,
  kMapValue = 2,
  kSessionEndStatus = 1,
};
// api.proto enum DataType (Status is SessionStatus).
constexpr uint64_t kTypeString = 1, kTypeBool = 2, kTypeFloat64 = 3;
} // namespace hparams_pb
namespace struct_pb { // google.protobuf.Value
enum : int { kNumber = 2, kString = 3, kBool = 4 };
}

constexpr const char* kFileVersion = "brain.Event:2";

// CRC-32C, reflected Castagnoli polynomial, one table lookup per byte.
constexpr uint32_t kCrc32cPolynomial = 0x82F63B78;

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ (kCrc32cPolynomial & (0u - (crc & 1u)));
    }
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// Whether a scalar field holding its default value (0, "") is written:
// proto3 leaves out plain singular fields (implicit presence) but writes
// oneof members, repeated elements and map entries (explicit): a
// `simple_value` of 0 must be there, or TensorBoard drops the point.
enum class Presence { kImplicit, kExplicit };

// Appends protobuf wire-format fields to a byte string, as proto3
// serializers do (implicit-presence scalars are left out when zero).
class ProtoWriter {
 public:
  // int32, int64, uint64, enum and bool fields (wire type 0).
  ProtoWriter& varint(
      int field, uint64_t value, Presence presence = Presence::kImplicit) {
    if (value != 0 || presence == Presence::kExplicit) {
      tag(field, 0);
      append_varint(value);
    }
    return *this;
  }

  // Negative values take ten bytes, as int64 fields do.
  ProtoWriter& int64(int field, int64_t value) {
    return varint(field, static_cast<uint64_t>(value));
  }

  ProtoWriter& float64(
      int field, double value, Presence presence = Presence::kImplicit) {
    uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    // proto3 tests the bits, so -0.0 is written.
    if (bits != 0 || presence == Presence::kExplicit) {
      tag(field, 1);
      append_le(bits, 8);
    }
    return *this;
  }

  ProtoWriter& float32(
      int field, float value, Presence presence = Presence::kImplicit) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    if (bits != 0 || presence == Presence::kExplicit) {
      tag(field, 5);
      append_le(bits, 4);
    }
    return *this;
  }

  // string and bytes fields.
  ProtoWriter& bytes(
      int field,
      std::string_view value,
      Presence presence = Presence::kImplicit) {
    if (!value.empty() || presence == Presence::kExplicit) {
      tag(field, 2);
      append_varint(value.size());
      out_.append(value.data(), value.size());
    }
    return *this;
  }

  // A set message field is always written, even when empty.
  ProtoWriter& message(int field, const ProtoWriter& message) {
    return bytes(field, message.str(), Presence::kExplicit);
  }

  // `repeated double` is packed by default in proto3.
  ProtoWriter& packed_float64(int field, const std::vector<double>& values) {
    if (values.empty()) {
      return *this;
    }
    tag(field, 2);
    append_varint(values.size() * 8);
    for (double value : values) {
      uint64_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      append_le(bits, 8);
    }
    return *this;
  }

  const std::string& str() const {
    return out_;
  }

 private:
  void tag(int field, int wire_type) {
    append_varint((static_cast<uint64_t>(field) << 3) | wire_type);
  }

  void append_varint(uint64_t value) {
    while (value >= 0x80) {
      out_.push_back(static_cast<char>((value & 0x7F) | 0x80));
      value >>= 7;
    }
    out_.push_back(static_cast<char>(value));
  }

  void append_le(uint64_t value, int width) {
    for (int i = 0; i < width; ++i) {
      out_.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    }
  }

  std::string out_;
};

// SummaryMetadata naming `plugin` with serialized plugin data `content`.
ProtoWriter plugin_metadata(
    const std::string& plugin, std::string_view content) {
  ProtoWriter plugin_data;
  plugin_data.bytes(metadata_pb::kPluginName, plugin)
      .bytes(metadata_pb::kContent, content);
  ProtoWriter summary_metadata;
  summary_metadata.message(metadata_pb::kPluginData, plugin_data);
  return summary_metadata;
}

// `value` as a google.protobuf.Value, with the hparams DataType it has.
std::pair<ProtoWriter, uint64_t> hparam_value(const HParamValue& value) {
  ProtoWriter out;
  if (const auto* number = std::get_if<double>(&value.value())) {
    out.float64(struct_pb::kNumber, *number, Presence::kExplicit);
    return {out, hparams_pb::kTypeFloat64};
  }
  if (const auto* flag = std::get_if<bool>(&value.value())) {
    out.varint(struct_pb::kBool, *flag, Presence::kExplicit);
    return {out, hparams_pb::kTypeBool};
  }
  out.bytes(
      struct_pb::kString,
      std::get<std::string>(value.value()),
      Presence::kExplicit);
  return {out, hparams_pb::kTypeString};
}

std::string hostname() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') {
    return "localhost";
  }
  return name.data();
}

// Tells apart event files that one process opens in the same second, as
// tensorboard's EventFileWriter does with its global uid.
std::atomic<int64_t> next_file_id{0};

std::string event_file_name(const std::string& suffix) {
  const auto seconds = static_cast<long long>(unix_time());
  std::array<char, 32> stamp{};
  std::snprintf(stamp.data(), stamp.size(), "%010lld", seconds);
  return hotloop::detail::str_cat(
      "events.out.tfevents.",
      stamp.data(),
      ".",
      hostname(),
      ".",
      ::getpid(),
      ".",
      next_file_id.fetch_add(1),
      suffix);
}

// PyTorch's histogram bucket edges (SummaryWriter.default_bins, after
// TensorFlow's): 0 and ±1e-12 * 1.1^k for every such value below 1e20,
// ascending. The same multiplications in double give the same edges.
const std::vector<double>& default_bucket_edges() {
  static const std::vector<double> edges = [] {
    std::vector<double> positive;
    for (double v = 1e-12; v < 1e20; v *= 1.1) {
      positive.push_back(v);
    }
    std::vector<double> all;
    all.reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) {
      all.push_back(-*it);
    }
    all.push_back(0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return edges;
}

struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limits, buckets;
};

// Values counted at a time by make_histogram: its float64 and index
// copies of a slice take 16 bytes a value (256 MiB), not of a whole
// embedding at once.
constexpr int64_t kHistogramSlice = int64_t{1} << 24;

// torch.utils.tensorboard.summary.make_histogram over the default edges,
// counted where the values are (a GPU's gradients are not copied to the
// host), kHistogramSlice values at a time, with one read-back of the counts
// and the five sums (and on CUDA bincount's own of its slice's min and max). A
// non-finite value gives std::nullopt, or throws naming the first with
// `throw_if_nonfinite`.
std::optional<Histogram> make_histogram(
    const std::string& tag, const at::Tensor& values, bool throw_if_nonfinite) {
  const at::NoGradGuard no_grad;
  const std::vector<double>& edges = default_bucket_edges();
  const auto bins = static_cast<int64_t>(edges.size()) - 1;
  const at::Tensor all = values.detach().reshape({-1});
  const at::Tensor limits =
      at::tensor(edges, at::kDouble).to(all.device(), /*non_blocking=*/true);
  at::Tensor counts; // [bins + 2]: below the edges, each bin, beyond
  at::Tensor low, high, sum, squares, nonfinite;
  for (int64_t start = 0; start < all.numel(); start += kHistogramSlice) {
    // Like PyTorch (`values.astype(float)`), everything is counted in
    // float64.
    const at::Tensor flat =
        all.slice(0, start, start + kHistogramSlice).to(at::kDouble);
    // numpy.histogram: bin i holds [edges[i], edges[i+1]), the last bin
    // [edges[bins-1], edges[bins]]. bucketize(right) gives i + 1 for bin
    // i, 0 below the first edge and bins + 1 from the last one on.
    const at::Tensor slot =
        at::bucketize(flat, limits, /*out_int32=*/false, /*right=*/true)
            .masked_fill_(flat.eq(edges.back()), bins);
    const at::Tensor part = at::bincount(slot, {}, bins + 2);
    const auto [part_low, part_high] = at::aminmax(flat);
    const at::Tensor part_nonfinite =
        at::isfinite(flat).logical_not().sum().to(at::kDouble);
    if (!counts.defined()) {
      counts = part;
      low = part_low;
      high = part_high;
      sum = flat.sum();
      squares = at::dot(flat, flat);
      nonfinite = part_nonfinite;
    } else {
      counts.add_(part);
      low = at::minimum(low, part_low);
      high = at::maximum(high, part_high);
      sum.add_(flat.sum());
      squares.add_(at::dot(flat, flat));
      nonfinite.add_(part_nonfinite);
    }
  }
  const at::Tensor host =
      at::cat({at::stack({low, high, sum, squares, nonfinite}),
               counts.slice(0, 1, bins + 1).to(at::kDouble)})
          .to(at::kCPU);
  const double* summary = host.data_ptr<double>();
  if (summary[4] > 0) {
    if (!throw_if_nonfinite) {
      return std::nullopt;
    }
    const int64_t first =
        at::isfinite(all).logical_not().nonzero()[0][0].item<int64_t>();
    HOTLOOP_CHECK(
        false,
        "add_histogram(\"",
        tag,
        "\"): values must be finite, got ",
        all[first].item<double>(),
        " at flat index ",
        first);
  }
  const double* count = summary + 5;
  // Keep the bins from the first to the last non-empty one. TensorBoard
  // reads only right edges, so an empty bucket goes first to carry the left
  // edge of the first non-empty bin.
  const auto occupied = [](double c) { return c > 0; };
  const double* first = std::find_if(count, count + bins, occupied);
  HOTLOOP_CHECK(
      first != count + bins,
      "add_histogram(\"",
      tag,
      "\"): no value lies within the buckets' range (|x| < 1e20)");
  const auto start = static_cast<size_t>(first - count);
  size_t end = static_cast<size_t>(bins);
  while (count[end - 1] == 0) {
    --end;
  }
  Histogram h;
  h.min = summary[0];
  h.max = summary[1];
  h.num = static_cast<double>(all.numel());
  h.sum = summary[2];
  h.sum_squares = summary[3];
  h.buckets.push_back(0);
  h.buckets.insert(h.buckets.end(), count + start, count + end);
  h.bucket_limits.assign(edges.begin() + start, edges.begin() + end + 1);
  return h;
}

// add_histogram's checks of `values`, then make_histogram.
std::optional<Histogram> checked_histogram(
    const std::string& tag, const at::Tensor& values, bool throw_if_nonfinite) {
  HOTLOOP_CHECK(
      values.defined(), "add_histogram(\"", tag, "\"): undefined tensor");
  const at::ScalarType dtype = values.scalar_type();
  HOTLOOP_CHECK(
      c10::isFloatingType(dtype) || c10::isIntegralType(dtype, true),
      "add_histogram(\"",
      tag,
      "\"): values must be of a floating or integer dtype, got ",
      dtype);
  HOTLOOP_CHECK(
      values.numel() > 0, "add_histogram(\"", tag, "\"): the tensor is empty");
  return make_histogram(tag, values, throw_if_nonfinite);
}

// The summary Value of histogram `h` under `tag`.
std::string histogram_value(const std::string& tag, const Histogram& h) {
  ProtoWriter histo;
  histo.float64(histogram_pb::kMin, h.min)
      .float64(histogram_pb::kMax, h.max)
      .float64(histogram_pb::kNum, h.num)
      .float64(histogram_pb::kSum, h.sum)
      .float64(histogram_pb::kSumSquares, h.sum_squares)
      .packed_float64(histogram_pb::kBucketLimit, h.bucket_limits)
      .packed_float64(histogram_pb::kBucket, h.buckets);
  ProtoWriter v;
  v.bytes(value_pb::kTag, tag).message(value_pb::kHisto, histo);
  return v.str();
}

// What libpng's callbacks write to: the PNG bytes and the error, if any.
struct PngSink {
  std::string* out = nullptr;
  bool out_of_memory = false;
  char error[256] = {};
};

void png_append(png_structp png, png_bytep data, png_size_t size) {
  auto* sink = static_cast<PngSink*>(png_get_io_ptr(png));
  try {
    sink->out->append(reinterpret_cast<const char*>(data), size);
  } catch (const std::bad_alloc&) {
    // No exception may cross libpng's C frames: report after it returns.
    sink->out_of_memory = true;
  }
}

void png_flush_nothing(png_structp) {}

[[noreturn]] void png_fail(png_structp png, png_const_charp message) {
  auto* sink = static_cast<PngSink*>(png_get_error_ptr(png));
  std::snprintf(sink->error, sizeof sink->error, "%s", message);
  png_longjmp(png, 1);
}

void png_ignore_warning(png_structp, png_const_charp) {}

// Encodes 8-bit pixels [height, width, channels] as PNG into sink->out.
// libpng reports errors by longjmp to the setjmp here, so this function
// holds only trivially destructible locals: the jump skips no destructor.
bool encode_png(
    const uint8_t* pixels,
    uint32_t height,
    uint32_t width,
    int channels,
    PngSink* sink) {
  png_structp png = png_create_write_struct(
      PNG_LIBPNG_VER_STRING, sink, png_fail, png_ignore_warning);
  if (png == nullptr) {
    std::snprintf(sink->error, sizeof sink->error, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  const int color_type = channels == 1   ? PNG_COLOR_TYPE_GRAY
                         : channels == 3 ? PNG_COLOR_TYPE_RGB
                                         : PNG_COLOR_TYPE_RGBA;
  png_set_write_fn(png, sink, png_append, png_flush_nothing);
  png_set_IHDR(
      png,
      info,
      width,
      height,
      8,
      color_type,
      PNG_INTERLACE_NONE,
      PNG_COMPRESSION_TYPE_DEFAULT,
      PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  const size_t row_bytes = static_cast<size_t>(width) * channels;
  for (uint32_t y = 0; y < height; ++y) {
    png_write_row(png, pixels + y * row_bytes);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return !sink->out_of_memory;
}

// [C, H, W] uint8 or floating -> [H, W, C] uint8 contiguous on the CPU,
// scaled as torch.utils.tensorboard.summary.image does for floats:
// `(x.astype(float32) * 255).clip(0, 255).astype(uint8)`, which truncates.
at::Tensor to_hwc_bytes(const at::Tensor& image) {
  at::Tensor pixels = image.detach().to(at::kCPU);
  if (pixels.scalar_type() != at::kByte) {
    pixels = at::nan_to_num(pixels.to(at::kFloat), /*nan=*/0.0)
                 .mul(255)
                 .clamp(0, 255)
                 .to(at::kByte);
  }
  return pixels.permute({1, 2, 0}).contiguous();
}

} // namespace

namespace detail {

uint32_t crc32c(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc = kCrc32cTable[(crc ^ bytes[i]) & 0xFF] ^ (crc >> 8);
  }
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

} // namespace detail

double unix_time() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

SummaryWriter::SummaryWriter(
    const std::string& log_dir, const std::string& filename_suffix) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  HOTLOOP_CHECK(
      !ec, log_dir, ": cannot create the log directory: ", ec.message());
  path_ = (std::filesystem::path(log_dir) / event_file_name(filename_suffix))
              .string();
  file_ = std::fopen(path_.c_str(), "wb");
  HOTLOOP_CHECK(
      file_ != nullptr,
      path_,
      ": cannot create the event file: ",
      std::strerror(errno));
  try {
    ProtoWriter version;
    version.float64(event_pb::kWallTime, unix_time())
        .bytes(event_pb::kFileVersion, kFileVersion);
    write_event(version.str());
    flush();
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

SummaryWriter::~SummaryWriter() {
  // A failed flush cannot be reported from here; the records written
  // before it are intact.
  std::fflush(file_);
  std::fclose(file_);
}

void SummaryWriter::flush() {
  HOTLOOP_CHECK(
      std::fflush(file_) == 0, path_, ": write failed: ", std::strerror(errno));
}

void SummaryWriter::write_event(const std::string& event) {
  // TFRecord framing: uint64 length, masked CRC of those 8 bytes, the data,
  // masked CRC of the data; all little-endian.
  std::string record;
  record.reserve(event.size() + 16);
  const auto append_le = [&record](uint64_t value, int width) {
    for (int i = 0; i < width; ++i) {
      record.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
    }
  };
  append_le(event.size(), 8);
  append_le(detail::masked_crc32c(record.data(), 8), 4);
  record += event;
  append_le(detail::masked_crc32c(event.data(), event.size()), 4);
  HOTLOOP_CHECK(
      std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
      path_,
      ": write failed: ",
      std::strerror(errno));
}

void SummaryWriter::add_session_start(int64_t step, double wall_time) {
  ProtoWriter session;
  session.int64(session_log_pb::kStatus, session_log_pb::kStart);
  ProtoWriter event;
  event.float64(event_pb::kWallTime, wall_time)
      .int64(event_pb::kStep, step)
      .message(event_pb::kSessionLog, session);
  write_event(event.str());
}

void SummaryWriter::write_summary_value(
    const std::string& value, int64_t step, double wall_time) {
  ProtoWriter summary;
  summary.bytes(summary_pb::kValue, value, Presence::kExplicit);
  ProtoWriter event;
  event.float64(event_pb::kWallTime, wall_time)
      .int64(event_pb::kStep, step)
      .message(event_pb::kSummary, summary);
  write_event(event.str());
}

void SummaryWriter::add_scalar(
    const std::string& tag, double value, int64_t step, double wall_time) {
  ProtoWriter v;
  v.bytes(value_pb::kTag, tag)
      .float32(
          value_pb::kSimpleValue,
          static_cast<float>(value),
          Presence::kExplicit);
  write_summary_value(v.str(), step, wall_time);
}

void SummaryWriter::add_histogram(
    const std::string& tag,
    const at::Tensor& values,
    int64_t step,
    double wall_time) {
  write_summary_value(
      histogram_value(tag, *checked_histogram(tag, values, true)),
      step,
      wall_time);
}

bool SummaryWriter::add_histogram_if_finite(
    const std::string& tag,
    const at::Tensor& values,
    int64_t step,
    double wall_time) {
  const std::optional<Histogram> h = checked_histogram(tag, values, false);
  if (h.has_value()) {
    write_summary_value(histogram_value(tag, *h), step, wall_time);
  }
  return h.has_value();
}

void SummaryWriter::add_text(
    const std::string& tag,
    const std::string& text,
    int64_t step,
    double wall_time) {
  ProtoWriter dim;
  dim.int64(tensor_pb::kDimSize, 1);
  ProtoWriter shape;
  shape.message(tensor_pb::kDim, dim);
  ProtoWriter string_tensor;
  string_tensor.varint(tensor_pb::kDtype, tensor_pb::kDtString)
      .message(tensor_pb::kShape, shape)
      .bytes(tensor_pb::kStringVal, text, Presence::kExplicit);
  // TextPluginData(version=0) serializes to no bytes.
  ProtoWriter v;
  v.bytes(value_pb::kTag, tag + "/text_summary")
      .message(value_pb::kTensor, string_tensor)
      .message(value_pb::kMetadata, plugin_metadata("text", ""));
  write_summary_value(v.str(), step, wall_time);
}

void SummaryWriter::add_image(
    const std::string& tag,
    const at::Tensor& image,
    int64_t step,
    double wall_time) {
  HOTLOOP_CHECK(image.defined(), "add_image(\"", tag, "\"): undefined tensor");
  const int64_t channels = image.dim() == 3 ? image.size(0) : 0;
  HOTLOOP_CHECK(
      image.dim() == 3 && (channels == 1 || channels == 3 || channels == 4) &&
          image.size(1) > 0 && image.size(2) > 0,
      "add_image(\"",
      tag,
      "\"): image must be [C, H, W] with C = 1, 3 or 4, got shape ",
      image.sizes());
  HOTLOOP_CHECK(
      image.scalar_type() == at::kByte ||
          c10::isFloatingType(image.scalar_type()),
      "add_image(\"",
      tag,
      "\"): image must be uint8 or floating, got ",
      image.scalar_type());

  const at::Tensor pixels = to_hwc_bytes(image);
  const auto height = static_cast<uint32_t>(pixels.size(0));
  const auto width = static_cast<uint32_t>(pixels.size(1));
  std::string png;
  PngSink sink;
  sink.out = &png;
  HOTLOOP_CHECK(
      encode_png(
          pixels.data_ptr<uint8_t>(),
          height,
          width,
          static_cast<int>(channels),
          &sink),
      "add_image(\"",
      tag,
      "\"): PNG encoding failed: ",
      sink.out_of_memory ? "out of memory" : sink.error);

  ProtoWriter img;
  img.varint(image_pb::kHeight, height)
      .varint(image_pb::kWidth, width)
      .varint(image_pb::kColorspace, static_cast<uint64_t>(channels))
      .bytes(image_pb::kEncoded, png);
  ProtoWriter v;
  v.bytes(value_pb::kTag, tag).message(value_pb::kImage, img);
  write_summary_value(v.str(), step, wall_time);
}

void SummaryWriter::add_hparams(
    const std::map<std::string, HParamValue>& hparams,
    const std::map<std::string, double>& metrics,
    int64_t step,
    SessionStatus status,
    bool metric_scalars) {
  ProtoWriter experiment;
  ProtoWriter session_start;
  for (const auto& [name, value] : hparams) {
    const auto [struct_value, type] = hparam_value(value);
    ProtoWriter entry; // map entries carry both fields
    entry.bytes(hparams_pb::kMapKey, name, Presence::kExplicit)
        .message(hparams_pb::kMapValue, struct_value);
    session_start.message(hparams_pb::kSessionStartHParams, entry);

    ProtoWriter info;
    info.bytes(hparams_pb::kHParamInfoName, name)
        .varint(hparams_pb::kHParamInfoType, type);
    experiment.message(hparams_pb::kExperimentHParamInfos, info);
  }
  for (const auto& [name, value] : metrics) {
    ProtoWriter metric_name;
    metric_name.bytes(hparams_pb::kMetricNameTag, name);
    ProtoWriter info;
    info.message(hparams_pb::kMetricInfoName, metric_name);
    experiment.message(hparams_pb::kExperimentMetricInfos, info);
  }
  ProtoWriter session_end;
  session_end.varint(
      hparams_pb::kSessionEndStatus, static_cast<uint64_t>(status));

  // HParamsPluginData{version: 0 (not written), data: one of the three}.
  const auto write_plugin_summary =
      [&](const char* tag, int data_field, const ProtoWriter& data) {
        ProtoWriter content;
        content.message(data_field, data);
        ProtoWriter v;
        v.bytes(value_pb::kTag, tag)
            .message(
                value_pb::kMetadata, plugin_metadata("hparams", content.str()));
        write_summary_value(v.str(), step, unix_time());
      };
  write_plugin_summary(
      "_hparams_/experiment", hparams_pb::kPluginExperiment, experiment);
  write_plugin_summary(
      "_hparams_/session_start_info",
      hparams_pb::kPluginSessionStart,
      session_start);
  write_plugin_summary(
      "_hparams_/session_end_info", hparams_pb::kPluginSessionEnd, session_end);
  if (metric_scalars) {
    for (const auto& [name, value] : metrics) {
      add_scalar(name, value, step);
    }
  }
}

at::Tensor make_image_grid(
    const at::Tensor& images, int64_t nrow, int64_t padding, double pad_value) {
  HOTLOOP_CHECK(
      images.defined() && images.dim() == 4 && images.size(0) > 0,
      "make_image_grid: images must be [N, C, H, W] with N > 0, got shape ",
      images.defined() ? images.sizes() : at::IntArrayRef{});
  HOTLOOP_CHECK(nrow > 0, "make_image_grid: nrow must be positive, got ", nrow);
  HOTLOOP_CHECK(
      padding >= 0,
      "make_image_grid: padding must be non-negative, got ",
      padding);
  at::Tensor batch = images;
  if (batch.size(1) == 1) {
    batch = at::cat({batch, batch, batch}, 1);
  }
  const int64_t count = batch.size(0);
  if (count == 1) {
    return batch.squeeze(0);
  }
  const int64_t columns = std::min(nrow, count);
  const int64_t rows = (count + columns - 1) / columns;
  const int64_t height = batch.size(2) + padding;
  const int64_t width = batch.size(3) + padding;
  at::Tensor grid = at::full(
      {batch.size(1), height * rows + padding, width * columns + padding},
      pad_value,
      batch.options());
  for (int64_t k = 0; k < count; ++k) {
    const int64_t y = k / columns;
    const int64_t x = k % columns;
    grid.narrow(1, y * height + padding, height - padding)
        .narrow(2, x * width + padding, width - padding)
        .copy_(batch[k]);
  }
  return grid;
}

} // namespace hotloop::log
