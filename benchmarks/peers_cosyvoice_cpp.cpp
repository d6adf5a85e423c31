// A per-stage timing driver for cosyvoice.cpp, built and run by benchmarks/peers.py (not part of the project's build).
//
//   peers_cosyvoice_cpp MODEL.gguf PROMPT_SPEECH.gguf TEXT_IDS.txt THREADS SEED
//
// Loads the model as cosyvoice-cli does for one-shot synthesis (CPU backend, one worker, the shared buffer policy,
// the CLI's default LLM KV cache k=q8_0, v=q4_0), prints {"ready": ...}, then answers each stdin line "run N" with
// one JSON line: a zero-shot render of the given text ids with exactly N speech tokens (min and max token/text
// ratio both set to N / text length, so the LLM never stops early), timed per stage:
//   prefill: the LLM call up to its first token; decode: the other N - 1 tokens;
//   flow: token2wav up to the HiFT noise request (the flow's encoder and all DiT steps); hift: the rest.
// Its noise callback stands in for the library's default one (see hift_clock).
// "quit" (or end of input) exits.

#include <cosyvoice.h>
#include <cosyvoice-lowlevel.h>
#include <ggml-backend.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace
{
using clock_type = std::chrono::steady_clock;

// The library's own noise callback is not reachable once replaced (get_noise_callback answers null for it), so
// this one does what it does: one growing buffer of standard normals, shared by the flow and HiFT requests.
struct hift_clock
{
    std::mt19937 rng{ 0 };
    std::vector<float> noise;
    clock_type::time_point before_hift{};
};

float* timed_noise(cosyvoice_noise_callback_stage_t stage, uint32_t length, float*, void* ctx)
{
    auto* clock = static_cast<hift_clock*>(ctx);
    if (stage == COSYVOICE_NOISE_CALLBACK_STAGE_BEFORE_HIFT)
        clock->before_hift = clock_type::now();
    if (stage != COSYVOICE_NOISE_CALLBACK_STAGE_BEFORE_FLOW && stage != COSYVOICE_NOISE_CALLBACK_STAGE_BEFORE_HIFT)
        return nullptr;
    if (length > clock->noise.size())
    {
        std::normal_distribution<float> dist(0.0f, 1.0f);
        const auto have = clock->noise.size();
        clock->noise.resize(length);
        for (auto i = have; i < length; ++i)
            clock->noise[i] = dist(clock->rng);
    }
    return clock->noise.data();
}

double seconds(clock_type::time_point a, clock_type::time_point b)
{
    return std::chrono::duration<double>(b - a).count();
}

void silent_log(ggml_log_level level, const char* text, void*)
{
    if (level >= GGML_LOG_LEVEL_WARN)
        std::fputs(text, stderr);
}
}

int main(int argc, char** argv)
{
    if (argc != 6)
    {
        std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT_SPEECH.gguf TEXT_IDS.txt THREADS SEED\n", argv[0]);
        return 2;
    }
    const char* model_path = argv[1];
    const char* prompt_path = argv[2];
    const auto threads = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 10));
    const auto seed = static_cast<uint32_t>(std::strtoul(argv[5], nullptr, 10));

    std::vector<int> text;
    {
        std::ifstream in(argv[3]);
        int id;
        while (in >> id)
            text.push_back(id);
    }
    if (text.empty())
    {
        std::fprintf(stderr, "no text ids in %s\n", argv[3]);
        return 2;
    }

    ggml_log_set(silent_log, nullptr);
    const auto load_start = clock_type::now();
    cosyvoice_init_backend_from_path(nullptr);
    cosyvoice_context_params_v3_t params = {};
    cosyvoice_init_default_context_params(&params.base_params.base_params);
    auto& base = params.base_params.base_params;
    base.llm_kv_cache_type = COSYVOICE_MAKE_SEPARATE_KV_CACHE(
        COSYVOICE_KV_CACHE_TYPE_Q8_0, COSYVOICE_KV_CACHE_TYPE_Q4_0, COSYVOICE_KV_CACHE_TYPE_Q8_0);
    base.inference_buffer_policy = COSYVOICE_INFERENCE_BUFFER_POLICY_SHARED;
    base.seed = seed;
    params.base_params.n_workers = 1;
    ggml_backend_t backend = ggml_backend_init_by_name("CPU", nullptr);
    if (!backend)
    {
        std::fprintf(stderr, "no CPU backend\n");
        return 1;
    }
    cosyvoice_context_t ctx = cosyvoice_load_from_file_ext(model_path, &params, backend, threads);
    if (!ctx)
    {
        std::fprintf(stderr, "failed to load %s\n", model_path);
        return 1;
    }
    cosyvoice_prompt_speech_t speech = cosyvoice_prompt_speech_load_from_file(prompt_path);
    if (!speech)
    {
        std::fprintf(stderr, "failed to load %s\n", prompt_path);
        return 1;
    }
    cosyvoice_prompt_t prompt = cosyvoice_prompt_init_from_prompt_speech(ctx, speech);
    cosyvoice_prompt_set(ctx, prompt, COSYVOICE_INFERENCE_MODE_ZERO_SHOT, nullptr, 0, true);

    hift_clock clock;
    clock.rng.seed(seed);
    cosyvoice_set_noise_callback(ctx, timed_noise, &clock);
    const uint32_t sample_rate = cosyvoice_get_sample_rate(ctx);
    std::printf("{\"ready\": true, \"load_s\": %.4f, \"sample_rate\": %u, \"text_tokens\": %zu, \"arch\": \"%s\"}\n",
                seconds(load_start, clock_type::now()), sample_rate, text.size(), cosyvoice_get_architecture(ctx));
    std::fflush(stdout);

    std::string line;
    while (std::getline(std::cin, line))
    {
        std::istringstream words(line);
        std::string command;
        uint32_t tokens = 0;
        words >> command >> tokens;
        if (command == "quit")
            break;
        if (command != "run" || tokens < 2)
        {
            std::printf("{\"error\": \"expected 'run N' with N >= 2 or 'quit'\"}\n");
            std::fflush(stdout);
            continue;
        }
        cosyvoice_generation_config_t config;
        cosyvoice_get_generation_config(ctx, &config);
        const float ratio = (static_cast<float>(tokens) + 0.5f) / static_cast<float>(text.size());
        config.min_token_text_ratio = ratio;
        config.max_token_text_ratio = ratio;
        if (!cosyvoice_set_generation_config(ctx, &config))
        {
            std::printf("{\"error\": \"generation config refused\"}\n");
            std::fflush(stdout);
            continue;
        }

        const auto t0 = clock_type::now();
        cosyvoice_llm_clear_accepted_tokens(ctx);
        bool final = false;
        const bool first = cosyvoice_llm_job_ext(ctx, text.data(), static_cast<uint32_t>(text.size()), prompt, 1, &final);
        const auto t1 = clock_type::now();
        const bool rest = first && cosyvoice_llm_job_ext(ctx, text.data(), static_cast<uint32_t>(text.size()), prompt,
                                                         tokens - 1, &final);
        const auto t2 = clock_type::now();
        const uint32_t n = cosyvoice_llm_get_n_accepted_tokens(ctx);
        cosyvoice_generated_speech wave = {};
        clock.before_hift = t2;
        const bool wav = rest && cosyvoice_token2wav(ctx, cosyvoice_llm_get_accepted_tokens(ctx), n, 1.0f, prompt, &wave);
        const auto t3 = clock_type::now();
        if (!wav)
        {
            std::printf("{\"error\": \"render failed (llm %d/%d, token2wav %d)\"}\n", first, rest, wav);
            std::fflush(stdout);
            continue;
        }
        std::printf("{\"llm_prefill_s\": %.4f, \"llm_decode_s\": %.4f, \"tokens\": %u, \"flow_s\": %.4f, "
                    "\"hift_s\": %.4f, \"total_s\": %.4f, \"samples\": %u, \"sample_rate\": %u}\n",
                    seconds(t0, t1), seconds(t1, t2), n, seconds(t2, clock.before_hift),
                    seconds(clock.before_hift, t3), seconds(t0, t3), wave.length, sample_rate);
        std::fflush(stdout);
    }
    cosyvoice_prompt_free(prompt);
    cosyvoice_prompt_speech_free(speech);
    cosyvoice_free(ctx);
    return 0;
}
