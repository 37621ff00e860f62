// The CPU kernel families the model layer calls, in one include: matmul over quantized weights,
// RMSNorm, RoPE, gated activations, paged attention, sampling, vector helpers, the thread pool.
#pragma once

#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/sampling.h"
#include "kernels/cpu/simd_ops.h"
#include "kernels/cpu/thread_pool.h"
