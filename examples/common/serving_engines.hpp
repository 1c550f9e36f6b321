#pragma once
// The engines serve and generate both run: one per shipped shape (model/shipped_presets.hpp)
// and KV codec pair (kv::CompiledKvCodecPairs, --kv-cache-dtype), serve's --draft-model ones,
// and the tensor- and pipeline-parallel ones of parallel_engines.hpp under MPI. Both programs
// compiled all of them (serve 227 s, generate 139 s at -O2). They are instantiated once, in
// serving_engines_*.cpp (the tinfer_serving_engines library), and declared extern below, so
// neither program compiles their constructors and step() (Engine defines those out of the
// class for this), nor the model, cache and scheduler code only those reach. A shape's engines
// share most of that code: a codec pair adds ~2 s of compile to its shape's unit.
//
// An engine missing from the lists below still works: the program instantiates it itself.
#include <tinfer/engine/engine.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/codec_pairs.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/sched/scheduler.hpp>
#include <tinfer/speculative/model_drafters.hpp>

#ifdef TINFER_WITH_CUDA_BACKEND
#include <tinfer/engine/cuda_backend.hpp>
#endif

#ifdef TINFER_WITH_MPI
#include <tinfer/distributed/mpi_communicator.hpp>
#include <tinfer/model/parallel.hpp>
#include <tinfer/model/pipeline_parallel.hpp>
#endif

namespace tinfer::examples {

// The programs' scheduler: one reply's prefill runs in chunks of 256 rows.
using Serving = sched::Scheduler<sched::ContinuousBatching<64, 1024>, sched::ChunkedPrefill<256>,
                                 sched::PreemptByRecompute, sched::FairShare>;

// The engine of one shipped shape and one KV codec pair (--kv-cache-dtype).
template <ModelConfig Cfg, class Codecs = kv::KvCodecPair<kv::Fp32Codec>>
using ServingEngineFor = Engine<model::Llama<Cfg>, Serving, Host,
                                PagedKv<16, typename Codecs::Key, typename Codecs::Value>>;

// serve --draft-model: a separate model of the same shape drafts (another quantization of it;
// the shipped shapes' vocabularies differ, so no other pairing could verify). Float32 KV.
template <ModelConfig Cfg>
using DraftedServingEngineFor = Engine<model::Llama<Cfg>, Serving, Host, PagedKv<16>,
                                       spec::DraftModelDrafter<model::Llama<Cfg>>>;

// --device cuda: the engine of a shipped shape on the CUDA backend (float32 KV), in builds with
// one (TINFER_WITH_CUDA_BACKEND: its device model is instantiated in device_models.cu).
template <ModelConfig Cfg>
using CudaServingEngineFor = Engine<model::Llama<Cfg>, Serving, Cuda, PagedKv<16>>;

}  // namespace tinfer::examples

namespace tinfer {

// One line per engine, the pairs in kv::CompiledKvCodecPairs' order.
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp32Codec, kv::Fp32Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp16Codec, kv::Fp16Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Bf16Codec, kv::Bf16Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp8E4M3Codec, kv::Fp8E4M3Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp8E5M2Codec, kv::Fp8E5M2Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Int8Codec, kv::Int8Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Int4Codec, kv::Int4Codec>>;
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16, kv::Int8Codec, kv::Int4Codec>>;

extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp32Codec, kv::Fp32Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp16Codec, kv::Fp16Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Bf16Codec, kv::Bf16Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp8E4M3Codec, kv::Fp8E4M3Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Fp8E5M2Codec, kv::Fp8E5M2Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Int8Codec, kv::Int8Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Int4Codec, kv::Int4Codec>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16, kv::Int8Codec, kv::Int4Codec>>;

// serve's --draft-model engines (DraftedServingEngineFor).
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Host,
                             PagedKv<16>,
                             spec::DraftModelDrafter<model::Llama<presets::smollm2_135m>>>;
extern template class Engine<model::Llama<presets::gemma3_270m>, examples::Serving, Host,
                             PagedKv<16>,
                             spec::DraftModelDrafter<model::Llama<presets::gemma3_270m>>>;

#ifdef TINFER_WITH_CUDA_BACKEND
// --device cuda's (serving_engines_cuda.cpp): SmolLM2 (Gemma 3's sliding layers are not on the
// device yet).
extern template class Engine<model::Llama<presets::smollm2_135m>, examples::Serving, Cuda,
                             PagedKv<16>>;
#endif

#ifdef TINFER_WITH_MPI
// parallel_engines.hpp's: SmolLM2 at TP 3 and over 2 stages, Gemma 3 at TP 2 (float32 KV).
extern template class Engine<
    model::Llama<presets::smollm2_135m, model::TensorParallel<3, distributed::MpiCommunicator>>,
    examples::Serving>;
extern template class Engine<
    model::Llama<presets::smollm2_135m, model::PipelineParallel<2, distributed::MpiCommunicator>>,
    examples::Serving>;
extern template class Engine<
    model::Llama<presets::gemma3_270m, model::TensorParallel<2, distributed::MpiCommunicator>>,
    examples::Serving>;
#endif

}  // namespace tinfer
