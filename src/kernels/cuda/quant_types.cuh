// Per-DType decoding of weight storage on the GPU, shared by the decode kernels (quant_matvec.cu),
// the dequantize-to-F16 kernels of the prompt path and get_rows (dequant.cu). Owns the device
// layout of every weight type (what upload_matrix writes); owns no kernels. Header-only,
// device code only (included by .cu files of kernels/cuda).
//
// Device layouts (rows of the file's blocks, except "split" types):
//   - Q4_1, Q5_1, Q2_K, Q5_K: the file's blocks unchanged (their block starts are 4- or
//     16-byte aligned, so the kernels load whole words).
//   - Q4_K: the file's blocks with qs repacked (upload_matrix): qs byte 16p + i (p < 8, i < 16)
//     holds weight 16p + i in its low nibble and 128 + 16p + i in its high one (the file pairs
//     64j + i with 64j + 32 + i). Each 16-byte piece then covers 16 consecutive weights in each
//     half of the block, so the 8 lanes reading one block's pieces read 128 contiguous bytes of
//     int8 activations per group (PieceQ4K) instead of 2 lines half used each.
//   - Split types Q4_0, Q5_0, Q8_0, Q3_K, Q6_K (2-byte-aligned blocks in the file): each block's
//     F16 scale d is moved out. Region A holds, row after row, every block without its d
//     (kABytes each: 16, 20, 32, 108, 208, all multiples of 4; 16 for Q4_0/Q8_0/Q6_K), region D
//     (right after A) holds the d's in the same order. Same total bytes as the file.
//   - F32, F16, BF16, FP8 E4M3: rows padded with zeros to a multiple of 16 bytes (row_bytes says
//     so), so every row starts 16-byte aligned.
//
// Every quantized type is read in chunks of 32 consecutive weights of one row, decoded into int8
// quants and one affine map per half chunk: w[e] = d[e/16] * q[e] + m[e/16]. Those are exactly the
// float operations of tensor/quantize.cpp's dequantize_row (same products, same order), so
// get_rows is bit-exact, and a dot product with int8 activations needs only dp4a.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace duet::cuda::quant {

struct Chunk {
  int q[8];    // byte e % 4 of q[e / 4] is the signed int8 quant of element e of the chunk
  float d[2];  // scale of elements 0..15 and 16..31
  float m[2];  // offset of elements 0..15 and 16..31 (0 for symmetric types)
};

// Where a matrix's bytes are (DeviceMatrix reduced to what the decoders need).
struct QView {
  const uint8_t* data;
  int64_t n_rows;
  int64_t blocks_per_row;
  size_t row_bytes;
};

__device__ __forceinline__ float h2f(uint32_t bits16) { return __half2float(__ushort_as_half(static_cast<unsigned short>(bits16))); }
__device__ __forceinline__ uint32_t ld32(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned int*>(p)); }
__device__ __forceinline__ uint32_t ld16(const uint8_t* p) { return __ldg(reinterpret_cast<const unsigned short*>(p)); }
__device__ __forceinline__ uint4 ld128(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// A 16-byte weight load of the K-quant decode pieces (PieceQ4K, PieceQ6K): on sm_80+ with the L2
// prefetch-size hint .L2::128B, so that the L2 fetches a block's whole 128-byte lines from DRAM
// at the first miss (a 144-byte Q4_K block, header and qs loaded by two instructions, straddles
// two lines). H200, qwen2-7b Q4_K_M tg128 (`-p 0 -n 128 -r 3`, three interleaved rounds, perf.md
// session 37): 498.0 / 498.1 / 497.9 tok/s against 490.5 / 491.8 / 491.0 without the hint;
// .L2::256B gave 494.0 / 493.4 / 493.2, and .L1::no_allocate with .L2::128B 483.7 / 483.7 / 483.3.
__device__ __forceinline__ uint4 ld128_l2(const uint8_t* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint4 r;
  asm("ld.global.nc.L2::128B.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
  return r;
#else
  return __ldg(reinterpret_cast<const uint4*>(p));
#endif
}

// Per-byte x - b for bytes x in [0, 127] and b <= 128, without borrows between bytes.
__device__ __forceinline__ int sub_bias(uint32_t x, uint32_t b) {
  return static_cast<int>(((x | 0x80808080u) - b * 0x01010101u) ^ 0x80808080u);
}
// Bits 0..3 of n to bit 0 of bytes 0..3 (the shifted copies of n never overlap, so no carries).
__device__ __forceinline__ uint32_t spread4(uint32_t n) { return (n * 0x00204081u) & 0x01010101u; }
// Byte k (run-time, < 12) of three words, without indexing a register array.
__device__ __forceinline__ uint32_t byte_of3(uint32_t w0, uint32_t w1, uint32_t w2, int k) {
  const uint32_t w = k < 4 ? w0 : (k < 8 ? w1 : w2);
  return (w >> (8 * (k & 3))) & 0xff;
}
__device__ __forceinline__ void words(const uint4& v, int* q) {
  q[0] = static_cast<int>(v.x);
  q[1] = static_cast<int>(v.y);
  q[2] = static_cast<int>(v.z);
  q[3] = static_cast<int>(v.w);
}

template <DType T>
struct QT;

template <>
struct QT<DType::kQ4_0> {
  static constexpr int kBlock = 32, kBytes = 18, kChunks = 1;
  static constexpr bool kSplit = true;
  static constexpr int kABytes = 16, kDOffset = 0;
  __device__ static void decode(const uint8_t* a, float d, int /*c*/, Chunk& ch) {
    const uint4 v = ld128(a);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      ch.q[i] = sub_bias(w[i] & 0x0f0f0f0fu, 8);
      ch.q[4 + i] = sub_bias((w[i] >> 4) & 0x0f0f0f0fu, 8);
    }
    ch.d[0] = ch.d[1] = d;
    ch.m[0] = ch.m[1] = 0.f;
  }
};

template <>
struct QT<DType::kQ4_1> {
  static constexpr int kBlock = 32, kBytes = 20, kChunks = 1;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* b, int /*c*/, Chunk& ch) {
    const uint32_t dm = ld32(b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t w = ld32(b + 4 + 4 * i);
      ch.q[i] = static_cast<int>(w & 0x0f0f0f0fu);
      ch.q[4 + i] = static_cast<int>((w >> 4) & 0x0f0f0f0fu);
    }
    ch.d[0] = ch.d[1] = h2f(dm & 0xffff);
    ch.m[0] = ch.m[1] = h2f(dm >> 16);
  }
};

// Q5_0 / Q5_1: element j < 16 is the low nibble of qs[j], element j + 16 its high nibble; bit j
// of qh is the fifth bit of element j.
__device__ __forceinline__ void q5_quants(const uint8_t* qh_p, const uint8_t* qs_p, int bias, Chunk& ch) {
  const uint32_t qh = ld32(qh_p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = ld32(qs_p + 4 * i);
    const uint32_t lo = (w & 0x0f0f0f0fu) | (spread4((qh >> (4 * i)) & 0xf) << 4);
    const uint32_t hi = ((w >> 4) & 0x0f0f0f0fu) | (spread4((qh >> (16 + 4 * i)) & 0xf) << 4);
    ch.q[i] = bias ? sub_bias(lo, bias) : static_cast<int>(lo);
    ch.q[4 + i] = bias ? sub_bias(hi, bias) : static_cast<int>(hi);
  }
}

template <>
struct QT<DType::kQ5_0> {
  static constexpr int kBlock = 32, kBytes = 22, kChunks = 1;
  static constexpr bool kSplit = true;
  static constexpr int kABytes = 20, kDOffset = 0;  // A: qh[4], qs[16]
  __device__ static void decode(const uint8_t* a, float d, int /*c*/, Chunk& ch) {
    q5_quants(a, a + 4, 16, ch);
    ch.d[0] = ch.d[1] = d;
    ch.m[0] = ch.m[1] = 0.f;
  }
};

template <>
struct QT<DType::kQ5_1> {
  static constexpr int kBlock = 32, kBytes = 24, kChunks = 1;
  static constexpr bool kSplit = false;
  __device__ static void decode(const uint8_t* b, int /*c*/, Chunk& ch) {
    const uint32_t dm = ld32(b);
    q5_quants(b + 4, b + 8, 0, ch);
    ch.d[0] = ch.d[1] = h2f(dm & 0xffff);
    ch.m[0] = ch.m[1] = h2f(dm >> 16);
  }
};

template <>
struct QT<DType::kQ8_0> {
  static constexpr int kBlock = 32, kBytes = 34, kChunks = 1;
  static constexpr bool kSplit = true;
  static constexpr int kABytes = 32, kDOffset = 0;  // A: qs[32]
  __device__ static void decode(const uint8_t* a, float d, int /*c*/, Chunk& ch) {
    words(ld128(a), ch.q);
    words(ld128(a + 16), ch.q + 4);
    ch.d[0] = ch.d[1] = d;
    ch.m[0] = ch.m[1] = 0.f;
  }
};

// K-quants: chunk c is elements 32c..32c+31 of a 256-element super-block.
template <>
struct QT<DType::kQ2_K> {
  static constexpr int kBlock = 256, kBytes = 84, kChunks = 8;
  static constexpr bool kSplit = false;
  // scales[16] at 0, qs[64] at 16, d at 80, dmin at 82.
  __device__ static void decode(const uint8_t* b, int c, Chunk& ch) {
    const uint8_t* qs = b + 16 + 32 * (c >> 2);
    const int sh = 2 * (c & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i) ch.q[i] = static_cast<int>((ld32(qs + 4 * i) >> sh) & 0x03030303u);
    const uint32_t sc = ld16(b + 2 * c);  // scales of sub-blocks 2c and 2c + 1
    const uint32_t dd = ld32(b + 80);
    const float d = h2f(dd & 0xffff), dmin = h2f(dd >> 16);
    ch.d[0] = d * static_cast<float>(sc & 0xf);
    ch.m[0] = -(dmin * static_cast<float>((sc >> 4) & 0xf));
    ch.d[1] = d * static_cast<float>((sc >> 8) & 0xf);
    ch.m[1] = -(dmin * static_cast<float>((sc >> 12) & 0xf));
  }
};

template <>
struct QT<DType::kQ3_K> {
  static constexpr int kBlock = 256, kBytes = 110, kChunks = 8;
  static constexpr bool kSplit = true;
  static constexpr int kABytes = 108, kDOffset = 108;  // A: hmask[32], qs[64], scales[12]
  __device__ static int scale(uint32_t s0, uint32_t s1, uint32_t s2, int j) {
    const int lo = j < 8 ? static_cast<int>(byte_of3(s0, s1, s2, j) & 0xf) : static_cast<int>(byte_of3(s0, s1, s2, j - 8) >> 4);
    const int hi = static_cast<int>((byte_of3(s0, s1, s2, 8 + (j & 3)) >> (2 * (j >> 2))) & 3);
    return (lo | (hi << 4)) - 32;
  }
  __device__ static void decode(const uint8_t* a, float d, int c, Chunk& ch) {
    const uint8_t* qs = a + 32 + 32 * (c >> 2);
    const int sh = 2 * (c & 3);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld32(qs + 4 * i) >> sh) & 0x03030303u;
      const uint32_t hb = ((ld32(a + 4 * i) >> c) & 0x01010101u) << 2;
      ch.q[i] = sub_bias(lo | hb, 4);  // lo - (h ? 0 : 4)
    }
    const uint32_t s0 = ld32(a + 96), s1 = ld32(a + 100), s2 = ld32(a + 104);
    ch.d[0] = d * static_cast<float>(scale(s0, s1, s2, 2 * c));
    ch.d[1] = d * static_cast<float>(scale(s0, s1, s2, 2 * c + 1));
    ch.m[0] = ch.m[1] = 0.f;
  }
};

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, scales bytes in three words.
// Branch-free: every lane of a warp decodes a different j.
__device__ __forceinline__ void k_scale_min(uint32_t s0, uint32_t s1, uint32_t s2, int j, int& sc, int& m) {
  const int sh = 8 * (j & 3);
  const uint32_t b0 = (s0 >> sh) & 0xff, b1 = (s1 >> sh) & 0xff, b2 = (s2 >> sh) & 0xff;
  const bool lo = j < 4;
  sc = static_cast<int>(lo ? (b0 & 0x3f) : ((b2 & 0x0f) | ((b0 >> 6) << 4)));
  m = static_cast<int>(lo ? (b1 & 0x3f) : ((b2 >> 4) | ((b1 >> 6) << 4)));
}

template <>
struct QT<DType::kQ4_K> {
  static constexpr int kBlock = 256, kBytes = 144, kChunks = 8;
  static constexpr bool kSplit = false;
  // d, dmin, scales[12] in the first 16 bytes; qs[128] at 16, repacked (see the top): chunk c
  // (sub-block c) is the low (c < 4) or high nibbles of qs bytes 32 (c % 4) .. + 31.
  __device__ static void decode(const uint8_t* b, int c, Chunk& ch) {
    const uint4 hdr = ld128(b);
    const uint8_t* qs = b + 16 + 32 * (c & 3);
    const uint4 v0 = ld128(qs), v1 = ld128(qs + 16);
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const int sh = 4 * (c >> 2);
#pragma unroll
    for (int i = 0; i < 8; ++i) ch.q[i] = static_cast<int>((w[i] >> sh) & 0x0f0f0f0fu);
    int sc, m;
    k_scale_min(hdr.y, hdr.z, hdr.w, c, sc, m);
    const float ds = h2f(hdr.x & 0xffff) * static_cast<float>(sc);
    const float dm = h2f(hdr.x >> 16) * static_cast<float>(m);
    ch.d[0] = ch.d[1] = ds;
    ch.m[0] = ch.m[1] = -dm;
  }
};

template <>
struct QT<DType::kQ5_K> {
  static constexpr int kBlock = 256, kBytes = 176, kChunks = 8;
  static constexpr bool kSplit = false;
  // d, dmin, scales[12] in the first 16 bytes; qh[32] at 16; qs[128] at 48.
  __device__ static void decode(const uint8_t* b, int c, Chunk& ch) {
    const uint4 hdr = ld128(b);
    const uint8_t* qs = b + 48 + 32 * (c >> 1);
    const uint4 v0 = ld128(qs), v1 = ld128(qs + 16);
    const uint4 h0 = ld128(b + 16), h1 = ld128(b + 32);
    const uint32_t w[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    const uint32_t h[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const int sh = 4 * (c & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i)
      ch.q[i] = static_cast<int>(((w[i] >> sh) & 0x0f0f0f0fu) | (((h[i] >> c) & 0x01010101u) << 4));
    int sc, m;
    k_scale_min(hdr.y, hdr.z, hdr.w, c, sc, m);
    const float ds = h2f(hdr.x & 0xffff) * static_cast<float>(sc);
    const float dm = h2f(hdr.x >> 16) * static_cast<float>(m);
    ch.d[0] = ch.d[1] = ds;
    ch.m[0] = ch.m[1] = -dm;
  }
};

template <>
struct QT<DType::kQ6_K> {
  static constexpr int kBlock = 256, kBytes = 210, kChunks = 8;
  static constexpr bool kSplit = true;
  static constexpr int kABytes = 208, kDOffset = 208;  // A: ql[128], qh[64], scales[16]
  __device__ static void decode(const uint8_t* a, float d, int c, Chunk& ch) {
    const int h = c >> 2, cc = c & 3;
    const uint8_t* ql = a + 64 * h + 32 * (cc & 1);
    const uint8_t* qh = a + 128 + 32 * h;
    const uint4 l0 = ld128(ql), l1 = ld128(ql + 16);
    const uint4 h0 = ld128(qh), h1 = ld128(qh + 16);
    const uint32_t lw[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
    const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
    const int sl = 4 * (cc >> 1), shh = 2 * cc;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      ch.q[i] = sub_bias(((lw[i] >> sl) & 0x0f0f0f0fu) | (((hw[i] >> shh) & 0x03030303u) << 4), 32);
    const uint32_t sc = ld16(a + 192 + 2 * c);
    ch.d[0] = d * static_cast<float>(static_cast<int8_t>(sc & 0xff));
    ch.d[1] = d * static_cast<float>(static_cast<int8_t>(sc >> 8));
    ch.m[0] = ch.m[1] = 0.f;
  }
};

// Decodes chunk c (< kChunks) of block b of row `row`.
template <DType T>
__device__ __forceinline__ void load_chunk_at(const QView& v, int64_t row, int64_t b, int c, Chunk& ch) {
  using Q = QT<T>;
  if constexpr (Q::kSplit) {
    const int64_t idx = row * v.blocks_per_row + b;
    const uint8_t* a = v.data + idx * Q::kABytes;
    const uint8_t* dp = v.data + v.n_rows * v.blocks_per_row * Q::kABytes + idx * 2;
    Q::decode(a, h2f(ld16(dp)), c, ch);
  } else {
    Q::decode(v.data + row * static_cast<int64_t>(v.row_bytes) + b * Q::kBytes, c, ch);
  }
}

// Decodes chunk `chunk` (0 <= chunk < blocks_per_row * kChunks) of row `row`.
template <DType T>
__device__ __forceinline__ void load_chunk(const QView& v, int64_t row, int64_t chunk, Chunk& ch) {
  load_chunk_at<T>(v, row, chunk / QT<T>::kChunks, static_cast<int>(chunk % QT<T>::kChunks), ch);
}

// --- Pieces: what one thread of the K-quant decode kernels loads at once (quant_matvec.cu) ---
// A piece is a few independent 16-byte loads of one 256-weight block: kGroups groups of 16
// weights, each group lying in one half (x_half) of one 32-value activation block (element
// x_offset(p, g) of the block onwards). decode() gives, per group, 4 words of unsigned quants r
// (byte e % 4 of r[g][e / 4] is weight e of the group) and the map w = d[g] * r + m[g]: the same
// weights as dequantize_row, with any per-weight bias folded into m (exact: powers of two).
// Piece p of every block goes to the same lane, so the scale-byte positions are lane constants.
__device__ __forceinline__ uint2 ld64(const uint8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }

// Scales (sc2) and mins (mn2) of a repacked Q4_K block's sub-blocks j (low byte) and j + 4 (high
// byte), k_scale_min's values, from the header words y = scales[0..3], z = [4..7], w = [8..11];
// sel = j | (4 + j) << 4 (a lane constant where it is called). One permute puts byte j of y (or z)
// and of w side by side; j's 6 low bits stay in the low byte, and j + 4's value (w's nibble, the
// top two bits of y's or z's byte as bits 4-5) forms the high byte.
__device__ __forceinline__ void q4k_scale_min_pair(uint32_t y, uint32_t z, uint32_t w, uint32_t sel,
                                                   uint32_t& sc2, uint32_t& mn2) {
  const uint32_t a = __byte_perm(y, w, sel), b = __byte_perm(z, w, sel);
  sc2 = (a & 0x0f3fu) | ((a << 6) & 0x3000u);
  mn2 = (b & 0x3fu) | ((b >> 4) & 0x0f00u) | ((b << 6) & 0x3000u);
}

// Q4_K (repacked qs, see the top), 8 pieces: qs bytes 16p .. 16p + 15 hold weights 16p + i (low
// nibbles, sub-block j = p / 2) and 128 + 16p + i (high nibbles, sub-block j + 4); plus the
// 16-byte header (d, dmin, scales), shared by the block's 8 lanes (one transaction).
struct PieceQ4K {
  static constexpr int kPieces = 8, kGroups = 2;
  uint4 qs, hdr;
  __device__ __forceinline__ void load(const QView& v, int64_t row, int64_t b, int p) {
    const uint8_t* blk = v.data + row * static_cast<int64_t>(v.row_bytes) + b * 144;
    hdr = ld128_l2(blk);
    qs = ld128_l2(blk + 16 + 16 * p);
  }
  __device__ static constexpr int x_offset(int p, int g) { return 128 * g + 16 * p; }
  __device__ static constexpr int x_half(int p) { return p & 1; }
  __device__ __forceinline__ void decode(int p, uint32_t (&r)[kGroups][4], float (&d)[kGroups],
                                         float (&m)[kGroups]) const {
    const uint32_t w[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r[0][i] = w[i] & 0x0f0f0f0fu;
      r[1][i] = (w[i] >> 4) & 0x0f0f0f0fu;
    }
    const float dd = h2f(hdr.x & 0xffff), dmin = h2f(hdr.x >> 16);
    const int j = p >> 1;  // sub-blocks j and j + 4
    uint32_t sc2, mn2;
    q4k_scale_min_pair(hdr.y, hdr.z, hdr.w, static_cast<uint32_t>(j | ((4 + j) << 4)), sc2, mn2);
    d[0] = dd * static_cast<float>(sc2 & 0xffu);
    d[1] = dd * static_cast<float>(sc2 >> 8);
    m[0] = -(dmin * static_cast<float>(mn2 & 0xffu));
    m[1] = -(dmin * static_cast<float>(mn2 >> 8));
  }
};

// Q6_K (split layout), 4 pieces: half hh = p / 2 of the block, positions l = 16g .. 16g + 15
// (g = p % 2) of its ql[0..31], ql[32..63] and qh[0..31], i.e. weights 128hh + 32q + l for the
// four quarters q (q = 0: ql[l] low nibble, qh bits 0-1; 1: ql[l + 32] low, bits 2-3; 2: ql[l]
// high, bits 4-5; 3: ql[l + 32] high, bits 6-7), scale scales[8hh + g + 2q]. The stored 6-bit
// value r is q + 32: m = -32 d.
struct PieceQ6K {
  static constexpr int kPieces = 4, kGroups = 4;
  uint4 l0, l1, h;
  uint2 sc;
  float d;
  __device__ __forceinline__ void load(const QView& v, int64_t row, int64_t b, int p) {
    const int64_t idx = row * v.blocks_per_row + b;
    const uint8_t* a = v.data + idx * 208;
    const int hh = p >> 1, g = p & 1;
    l0 = ld128_l2(a + 64 * hh + 16 * g);
    l1 = ld128_l2(a + 64 * hh + 32 + 16 * g);
    h = ld128_l2(a + 128 + 32 * hh + 16 * g);
    sc = ld64(a + 192 + 8 * hh);
    d = h2f(ld16(v.data + v.n_rows * v.blocks_per_row * 208 + idx * 2));
  }
  __device__ static constexpr int x_offset(int p, int q) { return 128 * (p >> 1) + 32 * q + 16 * (p & 1); }
  __device__ static constexpr int x_half(int p) { return p & 1; }
  __device__ __forceinline__ void decode(int p, uint32_t (&r)[kGroups][4], float (&dq)[kGroups],
                                         float (&m)[kGroups]) const {
    const uint32_t a[4] = {l0.x, l0.y, l0.z, l0.w}, b[4] = {l1.x, l1.y, l1.z, l1.w};
    const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      r[0][i] = (a[i] & 0x0f0f0f0fu) | ((hw[i] << 4) & 0x30303030u);
      r[1][i] = (b[i] & 0x0f0f0f0fu) | ((hw[i] << 2) & 0x30303030u);
      r[2][i] = ((a[i] >> 4) & 0x0f0f0f0fu) | (hw[i] & 0x30303030u);
      r[3][i] = ((b[i] >> 4) & 0x0f0f0f0fu) | ((hw[i] >> 2) & 0x30303030u);
    }
    const int g = p & 1;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t word = q < 2 ? sc.x : sc.y;  // bytes g + 2q: (g, g + 2) of x, (g, g + 2) of y
      const int8_t s = static_cast<int8_t>((word >> (8 * (g + 2 * (q & 1)))) & 0xff);
      dq[q] = d * static_cast<float>(s);
      m[q] = -32.f * dq[q];
    }
  }
};

template <DType T>
struct PieceOf;
template <>
struct PieceOf<DType::kQ4_K> {
  using type = PieceQ4K;
};
template <>
struct PieceOf<DType::kQ6_K> {
  using type = PieceQ6K;
};

// Chunks of one block that one decode thread takes together. Q4_K/Q5_K chunk pairs read the same
// qs bytes and Q2_K/Q3_K/Q6_K chunks 4h..4h+3 the same qs/qh bytes, but giving them to one thread
// (2 or 4 chunks) measured slower on the H200 (Q6_K 31-39% of HBM bandwidth against 48-66% with
// one chunk a thread: fewer threads, more registers, less in flight), so every type uses 1.
template <DType T>
constexpr int kWideChunks = 1;

// Element e of a decoded chunk as dequantize_row computes it (exact float operations).
__device__ __forceinline__ float chunk_value(const Chunk& ch, int e) {
  const int8_t q = static_cast<int8_t>((ch.q[e >> 2] >> (8 * (e & 3))) & 0xff);
  const int h = e >> 4;
  const float v = __fmul_rn(ch.d[h], static_cast<float>(q));
  return ch.m[h] != 0.f ? __fadd_rn(v, ch.m[h]) : v;
}

// FP8 E4M3 bytes -> halves holding value / 256, exactly, without FP8 instructions (any sm):
// sign to bit 15, exponent and mantissa shifted into F16's fields; F16's exponent bias is 8
// larger than E4M3's, so the half is the value times 2^-8 (normals and subnormals alike). The
// E4M3 NaN encodings (never in weights) decode to finite numbers.
// Bytes 1 and 3 keep their sign bit where F16 wants it (bits 15, 31) and need only a shift by one
// of the other seven bits (3 instructions for two values); bytes 0 and 2 move up by 7 or 8.
__device__ __forceinline__ void fp8x4_to_float(uint32_t w, float* out) {
  const uint32_t even = ((w & 0x007f007fu) << 7) | ((w & 0x00800080u) << 8);
  const uint32_t odd = (w & 0x80008000u) | ((w >> 1) & 0x3f803f80u);
  const float2 e = __half22float2(*reinterpret_cast<const __half2*>(&even));
  const float2 o = __half22float2(*reinterpret_cast<const __half2*>(&odd));
  out[0] = e.x;
  out[1] = o.x;
  out[2] = e.y;
  out[3] = o.y;
}
constexpr float kFp8Unscale = 256.f;  // multiply fp8x4_to_float's outputs by this

// The same 4 values, exact (no 2^-8 factor), by the hardware conversion (cvt.rn.f16x2.e4m3x2,
// sm_89+; 2 conversions and 4 F16->F32 moves for 4 values). Compiled for older targets it falls
// back to fp8x4_to_float times kFp8Unscale; the launchers pick it only where the device has FP8
// and the native path is on.
__device__ __forceinline__ void fp8x4_to_float_hw(uint32_t w, float* out) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t lo, hi;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(lo) : "h"(static_cast<unsigned short>(w & 0xffffu)));
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(hi) : "h"(static_cast<unsigned short>(w >> 16)));
  const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
  const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
  out[0] = a.x;
  out[1] = a.y;
  out[2] = b.x;
  out[3] = b.y;
#else
  fp8x4_to_float(w, out);
#pragma unroll
  for (int i = 0; i < 4; ++i) out[i] *= kFp8Unscale;
#endif
}

}  // namespace duet::cuda::quant
