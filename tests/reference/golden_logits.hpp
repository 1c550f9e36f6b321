#pragma once
// Reader for tests/data/reference/golden_logits.bin (SmolLM2, written by make_golden_logits.py)
// and gemma3_golden_logits.bin (make_gemma3_golden.py), made by the float64 numpy reference
// forward pass (llama_reference.py). The format (versions 1 and 2) is documented in
// tests/reference/README.md. Standard library only; throws std::runtime_error on a bad file.
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace tinfer::testing {

// Reference statistics of one logit vector (one position).
struct GoldenPosition {
    float max_abs_logit = 0;  // max over the whole vocabulary of |logit|
    std::int32_t argmax = -1;
    float top2_margin = 0;    // largest logit minus the second largest
    // max over the vocabulary of |float32 - float64| / max_abs_logit, where float32 is the same
    // reference run in float32 on the same tokens: the scale of an ordinary float32
    // implementation's error, to derive a tolerance from. NaN in version 1 files (not measured).
    float float32_error = std::numeric_limits<float>::quiet_NaN();
    // (token id, float64 reference logit rounded to float) for the top n_top ids at this position
    // (descending), then the fixed seeded-random ids not already among them; empty for decode
    // steps past the first n_decode_with_logits.
    std::vector<std::pair<std::int32_t, float>> logits;
};

struct GoldenPrompt {
    std::string name;
    std::string text;                  // the prompt text the ids came from (UTF-8)
    std::vector<std::int32_t> prompt;  // token ids fed at positions 0 .. n-1
    // Greedy continuation (EOS is not special): greedy[0] = prefill.back().argmax and
    // greedy[i+1] = decode[i].argmax.
    std::vector<std::int32_t> greedy;
    std::vector<GoldenPosition> prefill;  // one per prompt position, all with logits
    // decode[i]: logits after feeding greedy[i] at position prompt.size() + i; n_decode entries,
    // the first n_decode_with_logits with logits. decode.back().argmax would be one greedy token
    // more.
    std::vector<GoldenPosition> decode;
};

struct GoldenFile {
    std::uint32_t version = 0;
    std::uint32_t vocab_size = 0;
    std::uint32_t n_decode = 0;             // decode entries per prompt (SmolLM2: 64)
    std::uint32_t n_decode_with_logits = 0; // of which the first ones carry logits (SmolLM2: 16)
    std::uint32_t n_top = 0;                // top ids stored first at each position (32)
    std::array<std::uint8_t, 32> model_sha256{};
    std::string model_file;
    std::vector<GoldenPrompt> prompts;
};

namespace golden_detail {

class Reader {
public:
    explicit Reader(std::vector<unsigned char> bytes) : bytes_(std::move(bytes)) {}

    void need(std::size_t n) const {
        if (n > bytes_.size() - pos_)
            throw std::runtime_error("golden_logits: file truncated at byte " +
                                     std::to_string(pos_));
    }
    std::uint32_t u32() {
        need(4);
        std::uint32_t v = 0;
        for (int i = 3; i >= 0; --i) v = (v << 8) | bytes_[pos_ + static_cast<std::size_t>(i)];
        pos_ += 4;
        return v;
    }
    std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
    float f32() { return std::bit_cast<float>(u32()); }
    std::string str() {
        std::uint32_t n = u32();
        need(n);
        std::string s(reinterpret_cast<char const*>(bytes_.data() + pos_), n);
        pos_ += n;
        return s;
    }
    std::vector<std::int32_t> ids() {
        std::uint32_t n = u32();
        need(std::size_t{n} * 4);
        std::vector<std::int32_t> v(n);
        for (auto& x : v) x = i32();
        return v;
    }
    template <std::size_t N>
    std::array<std::uint8_t, N> raw() {
        need(N);
        std::array<std::uint8_t, N> a{};
        std::memcpy(a.data(), bytes_.data() + pos_, N);
        pos_ += N;
        return a;
    }
    GoldenPosition position(std::uint32_t vocab, std::uint32_t version) {
        GoldenPosition p;
        p.max_abs_logit = f32();
        p.argmax = i32();
        p.top2_margin = f32();
        if (version >= 2) p.float32_error = f32();
        std::uint32_t n = u32();
        need(std::size_t{n} * 8);
        p.logits.reserve(n);
        for (std::uint32_t i = 0; i < n; ++i) {
            std::int32_t id = i32();
            float v = f32();
            if (id < 0 || static_cast<std::uint32_t>(id) >= vocab)
                throw std::runtime_error("golden_logits: token id out of range");
            p.logits.emplace_back(id, v);
        }
        if (p.argmax < 0 || static_cast<std::uint32_t>(p.argmax) >= vocab)
            throw std::runtime_error("golden_logits: argmax out of range");
        return p;
    }
    bool at_end() const { return pos_ == bytes_.size(); }

private:
    std::vector<unsigned char> bytes_;
    std::size_t pos_ = 0;
};

}  // namespace golden_detail

inline GoldenFile load_golden_file(std::filesystem::path const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("golden_logits: cannot open " + path.string());
    std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)),
                                     std::istreambuf_iterator<char>());
    golden_detail::Reader r(std::move(bytes));

    auto magic = r.raw<4>();
    if (std::memcmp(magic.data(), "TFGL", 4) != 0)
        throw std::runtime_error("golden_logits: bad magic in " + path.string());
    GoldenFile f;
    f.version = r.u32();
    if (f.version != 1 && f.version != 2)
        throw std::runtime_error("golden_logits: unsupported version " +
                                 std::to_string(f.version));
    std::uint32_t n_prompts = r.u32();
    f.vocab_size = r.u32();
    f.n_decode = r.u32();
    f.n_decode_with_logits = r.u32();
    f.n_top = r.u32();
    f.model_sha256 = r.raw<32>();
    f.model_file = r.str();
    f.prompts.reserve(n_prompts);
    for (std::uint32_t k = 0; k < n_prompts; ++k) {
        GoldenPrompt p;
        p.name = r.str();
        p.text = r.str();
        p.prompt = r.ids();
        p.greedy = r.ids();
        std::uint32_t n_prefill = r.u32();
        std::uint32_t n_decode = r.u32();
        if (n_prefill != p.prompt.size() || n_decode != p.greedy.size())
            throw std::runtime_error("golden_logits: inconsistent position counts");
        p.prefill.reserve(n_prefill);
        for (std::uint32_t i = 0; i < n_prefill; ++i)
            p.prefill.push_back(r.position(f.vocab_size, f.version));
        p.decode.reserve(n_decode);
        for (std::uint32_t i = 0; i < n_decode; ++i)
            p.decode.push_back(r.position(f.vocab_size, f.version));
        f.prompts.push_back(std::move(p));
    }
    if (!r.at_end()) throw std::runtime_error("golden_logits: trailing bytes");
    return f;
}

inline std::vector<GoldenPrompt> load_golden_logits(std::filesystem::path const& path) {
    return load_golden_file(path).prompts;
}

}  // namespace tinfer::testing
