#!/usr/bin/env python3
"""llama.cpp beside duet on a GPU, through llama-cpp-python's low-level API (the C functions
llama-bench calls, without the Python sampling layer): for each GGUF file, all layers on the GPU,
flash attention on, F16 KV cache:
  pp512 / pp2048  prompt of N random tokens into an empty cache, n_batch 2048, n_ubatch 512
  tg128           128 tokens decoded one at a time into an empty cache
  gen             a greedy 16-token continuation (llama.cpp loads the file and generates from it)
  --depth D,...   also pp and tg with D tokens already in the cache (llama-bench's -d: "tg128 @
                  d4096"), prefilled once and cut back to D before each repetition; keys
                  ppN_dD_tok_s and tgN_dD_tok_s
Best of --reps after one warm-up, like llama-bench; prints JSON lines.

llama-cpp-python with CUDA: build its source distribution with
  CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=OFF" pip wheel --no-deps llama-cpp-python
and install the wheel where the GPU is (scripts/gpu-check.sh takes it with LLAMA_WHEEL), or pack
the built package with scripts/ref/pack_llamacpp_cuda.sh (no NCCL, each library once) for
gpu-quick.sh / gpu-decode-ab.sh's LLAMA_TAR and LLAMA_DEPS.

Usage: llamacpp_gpu_bench.py FILE.gguf [...] [--reps 3] [--pp 512,2048] [--tg 128] [--depth 4096,16384]"""
import argparse
import ctypes
import json
import random
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", default="512,2048")
    ap.add_argument("--tg", type=int, default=128)
    ap.add_argument("--depth", default="")
    args = ap.parse_args()
    pps = [int(x) for x in args.pp.split(",") if x]
    depths = [int(x) for x in args.depth.split(",") if x and int(x) > 0]
    import llama_cpp as L

    L.llama_backend_init()
    for path in args.files:
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 999
        model = L.llama_model_load_from_file(path.encode(), mp)
        if not model:
            print(json.dumps({"file": path, "error": "llama.cpp could not load the file"}))
            continue
        cp = L.llama_context_default_params()
        cp.n_ctx = max([4096] + [d + max(pps + [args.tg]) + 16 for d in depths])
        cp.n_batch = 2048
        cp.n_ubatch = 512
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED
        ctx = L.llama_init_from_model(model, cp)
        vocab = L.llama_model_get_vocab(model)
        n_vocab = L.llama_vocab_n_tokens(vocab)
        mem = L.llama_get_memory(ctx)
        rng = random.Random(0)

        def decode(tokens):
            arr = (L.llama_token * len(tokens))(*tokens)
            rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(tokens)))
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")

        def timed(d, n, one_by_one):
            # n tokens (one batch, or one at a time) after d tokens in the cache (sequence 0 cut
            # back to its first d tokens: at d = 0, emptied).
            L.llama_memory_seq_rm(mem, 0, d, -1)
            toks = [rng.randrange(100, min(n_vocab, 30000)) for _ in range(n)]
            t0 = time.perf_counter()
            if one_by_one:
                for t in toks:
                    decode([t])
            else:
                for i in range(0, n, 2048):
                    decode(toks[i:i + 2048])
            L.llama_synchronize(ctx)
            return n / (time.perf_counter() - t0)

        res = {"file": path, "engine": "llama.cpp (llama-cpp-python %s)" % L.__version__}
        for d in [0] + depths:
            # The depth prefilled once, then kept by every repetition (a warm-up first).
            L.llama_memory_clear(mem, True)
            prefill = [rng.randrange(100, min(n_vocab, 30000)) for _ in range(d)]
            for i in range(0, d, 2048):
                decode(prefill[i:i + 2048])
            at = f"_d{d}" if d else ""
            for n in pps:
                timed(d, n, False)
                res[f"pp{n}{at}_tok_s"] = max(timed(d, n, False) for _ in range(args.reps))
            if args.tg:
                timed(d, 8, True)
                res[f"tg{args.tg}{at}_tok_s"] = max(timed(d, args.tg, True) for _ in range(args.reps))
        # Greedy continuation of a short prompt: llama.cpp reads the file and generates from it.
        L.llama_memory_clear(mem, True)
        toks = [rng.randrange(100, min(n_vocab, 30000)) for _ in range(8)]
        out = []
        decode(toks)
        for _ in range(16):
            logits = L.llama_get_logits_ith(ctx, -1)
            best = max(range(n_vocab), key=lambda i: logits[i])
            out.append(best)
            decode([best])
        res["greedy16"] = out
        print(json.dumps(res), flush=True)
        L.llama_free(ctx)
        L.llama_model_free(model)


if __name__ == "__main__":
    sys.exit(main())
