#pragma once
// The wire form of a GenerationRequest, shared by the two protocols that move requests between
// processes: the prefill -> decode hand-off (disaggregation.hpp) and tensor/pipeline
// parallelism's lockstep (lockstep.hpp). One field list: a field added to the request is
// carried by both, or by neither (the size checks below make that a compile error).
//
// Values are written little-endian byte by byte, so the format does not depend on the hosts.
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <tinfer/distributed/kv_transfer.hpp>
#include <tinfer/engine/request.hpp>

namespace tinfer::distributed::wire {

class FrameWriter {
  public:
    template <std::integral Integer>
    void put(Integer value) {
        using Unsigned = std::make_unsigned_t<Integer>;
        auto const bits = static_cast<Unsigned>(value);
        for (std::size_t i = 0; i < sizeof(Unsigned); ++i)
            bytes_.push_back(static_cast<std::byte>(bits >> (8 * i) & 0xff));
    }
    void put(bool value) { put(static_cast<std::uint8_t>(value)); }
    void put(float value) { put(std::bit_cast<std::uint32_t>(value)); }
    void put(std::string_view text) {
        put(static_cast<std::uint64_t>(text.size()));
        for (char const c : text) bytes_.push_back(static_cast<std::byte>(c));
    }
    template <class T>
    void put_all(std::vector<T> const& values) {
        put(static_cast<std::uint64_t>(values.size()));
        for (T const& v : values) put(v);
    }
    std::vector<std::byte>& bytes() { return bytes_; }

  private:
    std::vector<std::byte> bytes_;
};

// Reads what FrameWriter wrote; a message that ends early or claims more than it holds is a
// `Failure` (its text begins with `what`), never a read past its end.
template <class Failure>
class BasicFrameReader {
  public:
    explicit BasicFrameReader(std::span<std::byte const> bytes,
                         std::string_view what = "disaggregation frame")
        : bytes_(bytes), what_(what) {}

    template <std::integral Integer>
    Integer take() {
        using Unsigned = std::make_unsigned_t<Integer>;
        need(sizeof(Unsigned));
        Unsigned bits = 0;
        for (std::size_t i = 0; i < sizeof(Unsigned); ++i)
            bits |= static_cast<Unsigned>(static_cast<Unsigned>(bytes_[at_++]) << (8 * i));
        return static_cast<Integer>(bits);
    }
    bool take_bool() { return take<std::uint8_t>() != 0; }
    float take_float() { return std::bit_cast<float>(take<std::uint32_t>()); }
    std::string take_string() {
        auto const size = count(1);
        std::string text(size, '\0');
        for (char& c : text) c = static_cast<char>(bytes_[at_++]);
        return text;
    }
    template <std::integral Integer>
    std::vector<Integer> take_all() {
        std::vector<Integer> values(count(sizeof(Integer)));
        for (Integer& v : values) v = take<Integer>();
        return values;
    }
    std::vector<std::string> take_strings() {
        std::vector<std::string> values(count(8));
        for (std::string& v : values) v = take_string();
        return values;
    }
    // A count of elements of at least `element_bytes` each, checked against what is left.
    std::size_t count(std::size_t element_bytes) {
        auto const n = take<std::uint64_t>();
        if (n > (bytes_.size() - at_) / element_bytes)
            throw Failure(std::string(what_) + ": a count of " + std::to_string(n) +
                          " exceeds the frame");
        return static_cast<std::size_t>(n);
    }
    bool done() const { return at_ == bytes_.size(); }

  private:
    void need(std::size_t n) const {
        if (bytes_.size() - at_ < n)
            throw Failure(std::string(what_) + ": ends after " + std::to_string(at_) + " bytes");
    }
    std::span<std::byte const> bytes_;
    std::string_view what_;
    std::size_t at_ = 0;
};

// The hand-off protocol's reader (disaggregation.hpp).
using FrameReader = BasicFrameReader<KvTransferError>;

// A request as another process needs it: the prompt as tokens (`prompt`: the request's own,
// or what the intake tokenized it to), the stop rule, the number of choices and the seed
// stream, the sampling settings and the scheduling fields. Not the text forms of the prompt,
// and not a grammar: neither the hand-off nor the lockstep carries structured output
// (RequestLimits refuses it there).
inline void put_request(FrameWriter& out, GenerationRequest const& r,
                        std::span<std::int32_t const> prompt) {
    out.put(static_cast<std::uint64_t>(prompt.size()));
    for (std::int32_t const token : prompt) out.put(token);
    out.put(r.max_tokens);
    out.put(r.n);
    out.put(r.seed.has_value());
    out.put(r.seed.value_or(0));
    out.put(static_cast<std::uint64_t>(r.stop.size()));
    for (std::string const& s : r.stop) out.put(std::string_view(s));
    out.put_all(r.stop_token_ids);
    out.put(r.ignore_eos);
    kernels::SamplingParams const& p = r.sampling;
    out.put(p.temperature);
    out.put(p.top_k);
    out.put(p.top_p);
    out.put(p.min_p);
    out.put(p.repetition_penalty);
    out.put(p.presence_penalty);
    out.put(p.frequency_penalty);
    out.put(static_cast<std::uint64_t>(p.logit_bias.size()));
    for (auto const& [token, bias] : p.logit_bias) {
        out.put(token);
        out.put(bias);
    }
    out.put(p.seed);
    out.put(p.logprobs);
    out.put(p.top_logprobs);
    out.put(r.priority);
    out.put(r.tenant);
    out.put(r.draft_tokens);
}
inline void put_request(FrameWriter& out, GenerationRequest const& r) {
    put_request(out, r, r.prompt_tokens);
}

template <class Failure>
GenerationRequest take_request(BasicFrameReader<Failure>& in) {
    GenerationRequest r;
    r.prompt_tokens = in.template take_all<std::int32_t>();
    r.max_tokens = in.template take<int>();
    r.n = in.template take<int>();
    bool const seeded = in.take_bool();
    auto const seed = in.template take<std::uint64_t>();
    if (seeded) r.seed = seed;
    r.stop = in.take_strings();
    r.stop_token_ids = in.template take_all<std::int32_t>();
    r.ignore_eos = in.take_bool();
    kernels::SamplingParams& p = r.sampling;
    p.temperature = in.take_float();
    p.top_k = in.template take<int>();
    p.top_p = in.take_float();
    p.min_p = in.take_float();
    p.repetition_penalty = in.take_float();
    p.presence_penalty = in.take_float();
    p.frequency_penalty = in.take_float();
    p.logit_bias.resize(in.count(8));
    for (auto& [token, bias] : p.logit_bias) {
        token = in.template take<std::int32_t>();
        bias = in.take_float();
    }
    p.seed = in.template take<std::uint64_t>();
    p.logprobs = in.take_bool();
    p.top_logprobs = in.template take<int>();
    r.priority = in.template take<int>();
    r.tenant = in.template take<std::uint32_t>();
    r.draft_tokens = in.template take<int>();
    return r;
}

// A field added to GenerationRequest or SamplingParams must be carried by put_request and
// take_request, or the processes would serve different requests: these sizes change with the
// fields (x86-64 libstdc++, the build this project targets).
#if defined(__x86_64__) && defined(__GLIBCXX__)
static_assert(sizeof(kernels::SamplingParams) == 72,
              "SamplingParams changed: carry the new field in distributed/request_wire.hpp");
static_assert(sizeof(GenerationRequest) == 264,
              "GenerationRequest changed: carry the new field in distributed/request_wire.hpp");
#endif

}  // namespace tinfer::distributed::wire
