#pragma once
// A GGUF model of any shape, written with the project's GGUF writer: seeded random f32
// weights, every tensor the shape's architecture binds (biases, QK-norm, sandwich norms where
// it has them) and the hyperparameters read_config reads back. A researcher's own shape can be
// run end to end with it (examples/custom_shape); the tests use it for the parts no shipped
// file uses (QKV bias, soft-capping) and for bad-input tests (a tensor type or a key the model
// refuses), which edit the writer before it is serialised. The layers' matrices may be
// quantized (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 by the reference quantizers), so the integer kernels
// run on a shape no file has.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/gguf/gguf_writer.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace tinfer::gguf {

class SyntheticModel {
  public:
    // `weight_scale` keeps activations of a random model in a useful range; `architecture`
    // replaces the family's general.architecture (and key prefix), for refusal tests.
    SyntheticModel(ModelConfig const& c, std::uint64_t seed, float weight_scale = 0.08f,
                   std::string const& architecture = "")
        : SyntheticModel(c, seed, weight_scale, architecture, TensorType::f32) {}
    // The layers' matrices stored as `layer_matrices` (every input width a multiple of 32); the
    // embedding, the LM head and the norms stay f32.
    SyntheticModel(ModelConfig const& c, std::uint64_t seed, TensorType layer_matrices)
        : SyntheticModel(c, seed, 0.08f, "", layer_matrices) {}

    // Every matrix, the embedding and the LM head included, in Q4_0 blocks of uniformly random
    // nibbles under one f16 scale per matrix (weights of the same spread as the normal ones): a
    // model of Llama-3-8B's shape (4.3 GiB) in seconds, where drawing each of its 8e9 weights
    // from a normal distribution and quantizing it would take minutes. For bandwidth
    // benchmarks, whose figures do not depend on the weights' values.
    static SyntheticModel random_q4_0_blocks(ModelConfig const& c, std::uint64_t seed) {
        return SyntheticModel(c, seed, 0.08f, "", TensorType::q4_0, /*random_blocks=*/true);
    }

  private:
    SyntheticModel(ModelConfig const& c, std::uint64_t seed, float weight_scale,
                   std::string const& architecture, TensorType layer_matrices,
                   bool random_blocks = false)
        : config_(c),
          random_(seed),
          scale_(weight_scale),
          layer_matrices_(layer_matrices),
          random_blocks_(random_blocks) {
        std::string const arch = architecture.empty() ? name_of(c.arch.family) : architecture;
        auto const key = [&](char const* suffix) { return arch + "." + suffix; };
        writer_.add("general.architecture", gguf::Value(arch));
        writer_.add(key("block_count"), gguf::Value(static_cast<std::uint32_t>(c.layers)));
        writer_.add(key("embedding_length"), gguf::Value(static_cast<std::uint32_t>(c.hidden)));
        writer_.add(key("attention.head_count"), gguf::Value(static_cast<std::uint32_t>(c.heads)));
        writer_.add(key("attention.head_count_kv"),
                    gguf::Value(static_cast<std::uint32_t>(c.kv_heads)));
        writer_.add(key("attention.key_length"),
                    gguf::Value(static_cast<std::uint32_t>(c.head_dim)));
        writer_.add(key("attention.value_length"),
                    gguf::Value(static_cast<std::uint32_t>(c.head_dim)));
        writer_.add(key("feed_forward_length"), gguf::Value(static_cast<std::uint32_t>(c.ffn)));
        writer_.add(key("context_length"), gguf::Value(static_cast<std::uint32_t>(c.max_context)));
        writer_.add(key("rope.freq_base"), gguf::Value(static_cast<float>(c.rope_base)));
        writer_.add(key("attention.layer_norm_rms_epsilon"),
                    gguf::Value(static_cast<float>(c.norm_eps)));
        if (c.sliding_window > 0) {
            writer_.add(key("attention.sliding_window"),
                        gguf::Value(static_cast<std::uint32_t>(c.sliding_window)));
        }
        if (c.arch.final_logit_softcap > 0) {
            writer_.add(key("final_logit_softcapping"),
                        gguf::Value(static_cast<float>(c.arch.final_logit_softcap)));
        }
        matrix("token_embd.weight", c.hidden, c.vocab, 1.0f);
        if (c.arch.lm_head == LmHead::separate) matrix("output.weight", c.hidden, c.vocab);
        norm("output_norm.weight", c.hidden);
        for (int i = 0; i < c.layers; ++i) {
            std::string const p = "blk." + std::to_string(i) + ".";
            norm(p + "attn_norm.weight", c.hidden);
            layer_matrix(p + "attn_q.weight", c.hidden, c.q_width());
            layer_matrix(p + "attn_k.weight", c.hidden, c.kv_width());
            layer_matrix(p + "attn_v.weight", c.hidden, c.kv_width());
            if (c.arch.qkv_bias) {
                vector(p + "attn_q.bias", c.q_width(), 0.0f, 0.5f);
                vector(p + "attn_k.bias", c.kv_width(), 0.0f, 0.5f);
                vector(p + "attn_v.bias", c.kv_width(), 0.0f, 0.5f);
            }
            if (c.arch.qk_norm) {
                norm(p + "attn_q_norm.weight", c.head_dim);
                norm(p + "attn_k_norm.weight", c.head_dim);
            }
            layer_matrix(p + "attn_output.weight", c.q_width(), c.hidden);
            if (c.arch.norms == NormPlacement::sandwich) {
                norm(p + "post_attention_norm.weight", c.hidden);
                norm(p + "post_ffw_norm.weight", c.hidden);
            }
            norm(p + "ffn_norm.weight", c.hidden);
            layer_matrix(p + "ffn_gate.weight", c.hidden, c.ffn);
            layer_matrix(p + "ffn_up.weight", c.hidden, c.ffn);
            layer_matrix(p + "ffn_down.weight", c.ffn, c.hidden);
        }
    }

  public:
    // A byte-level BPE vocabulary of config.vocab tokens spelled "t0", "t1", ... with no merges,
    // so an Engine (which reads the tokenizer and chat template from the file) can be built on
    // the model; prompts are then given as token ids. `eos` is the end-of-sequence token, if any.
    SyntheticModel& with_tokenizer(std::optional<std::int32_t> eos = std::nullopt) {
        std::vector<std::string> tokens;
        for (int id = 0; id < config_.vocab; ++id) tokens.push_back("t" + std::to_string(id));
        writer_.add("tokenizer.ggml.model", gguf::Value(std::string("gpt2")));
        writer_.add("tokenizer.ggml.pre", gguf::Value(std::string("gpt-2")));
        writer_.add_strings("tokenizer.ggml.tokens", tokens);
        writer_.add_strings("tokenizer.ggml.merges", {});
        if (eos) writer_.add("tokenizer.ggml.eos_token_id", gguf::Value(std::uint32_t(*eos)));
        return *this;
    }

    gguf::Writer& writer() { return writer_; }
    std::vector<std::byte> bytes() const { return writer_.to_bytes(); }

  private:
    std::vector<float> random_values(std::size_t n, float center, float spread) {
        std::normal_distribution<float> normal(center, spread);
        std::vector<float> v(n);
        for (float& x : v) x = normal(random_);
        return v;
    }
    void add_f32(std::string const& name, std::vector<std::uint64_t> dims,
                 std::vector<float> const& v) {
        writer_.add_tensor(name, gguf::TensorType::f32, std::move(dims),
                           std::as_bytes(std::span(v)));
    }
    // [rows][cols] values, spread scaled down with the input width unless given.
    std::vector<float> matrix_values(int cols, int rows, float spread = 0) {
        float const s = spread > 0 ? spread : scale_ / std::sqrt(static_cast<float>(cols) / 64.0f);
        return random_values(static_cast<std::size_t>(rows) * cols, 0.0f, s);
    }
    // [rows][cols] as GGUF stores it: ne0 = cols (the input features).
    void matrix(std::string const& name, int cols, int rows, float spread = 0) {
        if (random_blocks_) return random_q4_0_matrix(name, cols, rows, spread);
        add_f32(name, {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)},
                matrix_values(cols, rows, spread));
    }
    // A layer's matrix, stored as layer_matrices_.
    void layer_matrix(std::string const& name, int cols, int rows) {
        if (layer_matrices_ == TensorType::f32 || random_blocks_) return matrix(name, cols, rows);
        std::vector<float> const v = matrix_values(cols, rows);
        std::vector<std::uint64_t> dims{static_cast<std::uint64_t>(cols),
                                        static_cast<std::uint64_t>(rows)};
        auto const quantized = [&]<class Block>() {
            if (cols % 32 != 0)
                throw Error("SyntheticModel: " + name + " has " + std::to_string(cols) +
                            " input features; a quantized matrix needs a multiple of 32");
            std::vector<Block> blocks(v.size() / 32);
            for (std::size_t b = 0; b < blocks.size(); ++b)
                quant::quantize_block(v.data() + 32 * b, blocks[b]);
            writer_.add_tensor(name, layer_matrices_, std::move(dims),
                               std::as_bytes(std::span(blocks)));
        };
        switch (layer_matrices_) {
            case TensorType::q4_0:
                return quantized.template operator()<quant::BlockQ4_0>();
            case TensorType::q4_1:
                return quantized.template operator()<quant::BlockQ4_1>();
            case TensorType::q5_0:
                return quantized.template operator()<quant::BlockQ5_0>();
            case TensorType::q5_1:
                return quantized.template operator()<quant::BlockQ5_1>();
            case TensorType::q8_0:
                return quantized.template operator()<quant::BlockQ8_0>();
            default:
                throw Error("SyntheticModel: no quantizer for tensor type " +
                            std::to_string(static_cast<std::uint32_t>(layer_matrices_)) +
                            " (f32, q4_0, q4_1, q5_0, q5_1, q8_0)");
        }
    }
    // Q4_0 blocks of random nibbles q (weights d * (q - 8)) with d giving the matrix's spread
    // (the nibbles' standard deviation is sqrt(255 / 12) ~ 4.6); 8 bytes of xorshift per draw.
    void random_q4_0_matrix(std::string const& name, int cols, int rows, float spread) {
        if (cols % 32 != 0)
            throw Error("SyntheticModel: " + name + " has " + std::to_string(cols) +
                        " input features; a quantized matrix needs a multiple of 32");
        float const s = spread > 0 ? spread : scale_ / std::sqrt(static_cast<float>(cols) / 64.0f);
        std::uint16_t const d = float_to_f16_bits(s / 4.6f);
        std::vector<quant::BlockQ4_0> blocks(static_cast<std::size_t>(rows) * (cols / 32));
        std::uint64_t state = random_() | 1;
        for (quant::BlockQ4_0& block : blocks) {
            block.d = d;
            for (int half = 0; half < 2; ++half) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                std::memcpy(block.qs + 8 * half, &state, 8);
            }
        }
        writer_.add_tensor(name, TensorType::q4_0,
                           {static_cast<std::uint64_t>(cols), static_cast<std::uint64_t>(rows)},
                           std::as_bytes(std::span(blocks)));
    }
    void vector(std::string const& name, int n, float center, float spread) {
        add_f32(name, {static_cast<std::uint64_t>(n)},
                random_values(static_cast<std::size_t>(n), center, spread));
    }
    void norm(std::string const& name, int n) { vector(name, n, 1.0f, 0.1f); }

    ModelConfig config_;
    std::mt19937_64 random_;
    float scale_;
    TensorType layer_matrices_;
    bool random_blocks_;  // random_q4_0_blocks
    gguf::Writer writer_;
};

}  // namespace tinfer::gguf
