#include "module_access.h"

namespace hotloop::compress::detail {
namespace {

// Module::buffers_ is private; an explicit instantiation may name it
// ([temp.spec]/6), and the friend it defines hands the member pointer out.
struct BuffersTag {
  using type = TensorDict torch::nn::Module::*;
  friend type member_of(BuffersTag);
};

template <typename Tag, typename Tag::type Member>
struct MemberOf {
  friend typename Tag::type member_of(Tag) {
    return Member;
  }
};

template struct MemberOf<BuffersTag, &torch::nn::Module::buffers_>;

} // namespace

TensorDict& buffers_of(torch::nn::Module& module) {
  return module.*member_of(BuffersTag{});
}

} // namespace hotloop::compress::detail
