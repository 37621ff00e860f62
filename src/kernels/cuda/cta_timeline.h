// Host side of the per-CTA timelines (kernels/cuda/cta_timeline.cuh), present only in the
// diagnostic build (cmake -DDUET_CTA_TIMELINE=ON). cta_timeline_start: when DUET_CTA_TIMELINE_OUT
// names a file, allocates a buffer of DUET_CTA_TIMELINE_MAX records (default 4 M: 192 MiB) on the
// current device and binds it in every instrumented translation unit; cta_timeline_dump writes
// the records to that file as CSV (w, block, smid, t_start, t_wait, t_end, grid, rows; ns) and
// frees the buffer. Both do nothing when the variable is unset. scripts/cta_timeline_report.py
// reads the file.
#pragma once

#ifdef DUET_CTA_TIMELINE
namespace duet::cuda::kernels {
void cta_timeline_start();
void cta_timeline_dump();
void cta_timeline_bind_matvec_mma(unsigned long long* buf, unsigned long long cap);
void cta_timeline_bind_quant_mma(unsigned long long* buf, unsigned long long cap);
}  // namespace duet::cuda::kernels
#endif
