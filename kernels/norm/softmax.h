// Fused softmax forward kernels: row softmax over the last dim, and the scaled, causally masked
// softmax over attention scores. bf16/fp16 in and out, fp32 math, the row max subtracted first.
// A row whose every input is −inf (or masked) gives zeros, not NaN: no key takes any weight.
// Launchers enqueue on `stream` and never synchronize; they throw Unsupported for what
// softmax_unsupported() (row softmax) or row_unsupported() (causal; kernels/norm/row_tiling.h) refuses.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "harness/dtype.h"
#include "kernels/norm/row_tiling.h"

namespace topt::kernels {

// How a block reduces its row to the max and the sum of exponentials (kernels/norm/NOTES.md
// compares the two).
enum class SoftmaxAlgo {
  two_pass,  // block max, then block sum of exp(x − max): two block reductions
  online,    // each thread's (max, sum) pair, merged in one block reduction with rescaling
};

// Where a block holds its row between the one read and the one write.
enum class RowStorage {
  registers,      // packed in registers; one 1024-thread block per SM at 32768 wide
  shared_memory,  // staged by cp.async, three 32768-wide rows per SM; measured no faster (NOTES.md)
};

// "" when the shared-memory path takes this shape (16-byte vectors), else why not; the launch also
// refuses a row larger than the device lets one block hold.
std::string softmax_staged_unsupported(int64_t rows, int64_t cols, DType dtype);

// "" when softmax_forward takes rows of `cols` (one block per row, or a row over several blocks up to
// 262151 wide in bf16, any width), else why not.
std::string softmax_unsupported(int64_t rows, int64_t cols, DType dtype);
// The same for the split `split`: RowSplit::vocab_clusters takes rows of up to 4096 16-byte vectors
// per block of the device's largest cluster (524295 bf16 on an H100), staged_clusters of 8 blocks
// (262151).
std::string softmax_unsupported(int64_t rows, int64_t cols, DType dtype, RowSplit split);

// y = softmax(x) over each row of x [rows, cols]; rows wider than one block holds take several
// blocks each (clusters: no scratch needed).
void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype, SoftmaxAlgo algo,
                     RowStorage storage, cudaStream_t stream);
// The same with the row split chosen by `split` (kernels/norm/row_tiling.h):
// - block: one block per row where one holds it; wider rows over a cluster (choose_split_row_tiling);
// - cluster_when_rows_are_few: each of a few rows (decode) over a cluster of 8 blocks;
// - grid_when_wide_rows_are_few, grid_when_rows_are_few: each of rows too few to fill the SMs (wider
//   than a block holds, or any) over SMs / rows blocks of a cooperative grid, meeting in `scratch`;
//   grid_when_wide_rows_are_few takes the rows a block holds as cluster_when_rows_are_few does;
// - vocab_clusters: every row over a cluster sized to the rows (choose_vocab_row_tiling), up to 16
//   blocks, two blocks per SM where rows are many;
// - staged_clusters: every row over a cluster of up to 8 blocks (choose_staged_row_tiling).
// Split rows take any width (16-byte vectors over each row's aligned body, scalars at its edges) and
// need x and y at the same address modulo 16 bytes, and are reduced online (`storage` and `algo`
// apply only to one block per row). Where a wide row goes over a cluster of up to 8 blocks (block,
// the grid splits where the rows fill the SMs, staged_clusters) the blocks' slices are staged in
// shared memory by TMA bulk copies, three blocks per SM; elsewhere they are held in registers.
// `scratch` holds softmax_scratch_bytes() zeroed once before the first launch, and then serves this
// one shape on one stream; it may be null where that is 0.
size_t softmax_scratch_bytes(int64_t rows, int64_t cols, DType dtype, RowSplit split);
void softmax_forward(const void* x, void* y, int64_t rows, int64_t cols, DType dtype, SoftmaxAlgo algo,
                     RowStorage storage, RowSplit split, void* scratch, cudaStream_t stream);

// Which keys the causal kernel loads: the masked ones carry no information, so skipping them halves
// the bytes read over a square score matrix.
enum class CausalLoads { unmasked_keys, whole_row };

// y[b, i, :] = softmax(scale · x[b, i, :] with keys j > i masked to −inf) for scores x
// [batch_heads, seq, seq]; scale > 0 (attention: 1/sqrt(head_dim)).
void causal_softmax_forward(const void* x, void* y, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                            SoftmaxAlgo algo, CausalLoads loads, cudaStream_t stream);

// When the causal kernel writes the masked zeros, and in which order its blocks take the rows.
struct CausalSchedule {
  bool zeros_first = false;      // the masked tail is stored (streaming, evict-first) as soon as the loads are issued
  bool long_rows_first = false;  // block b takes row rows − 1 − b: the longest rows start first, the grid ends on short ones
  bool stream_stores = false;    // the row's values stored streaming (evict-first) as well as its zeros
};
void causal_softmax_forward(const void* x, void* y, int64_t batch_heads, int64_t seq, float scale, DType dtype,
                            SoftmaxAlgo algo, CausalLoads loads, CausalSchedule schedule, cudaStream_t stream);

}  // namespace topt::kernels
