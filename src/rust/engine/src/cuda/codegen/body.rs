//! The parts of the reduction kernel, in the order of its source: helpers and signature, the
//! block's rows, each row slot's registers, the loops over the reduced ranges and their tiles (the
//! tile loaded into shared memory, the pairs computed and reduced), and the rows' states stored.

use std::fmt::Write;

use super::exponentials;
use super::gen::Gen;
use super::reducer::Reducer;
use super::variant::KernelOptions;
use crate::cuda::finish;
use crate::formula::{Category, NodeId, Op};
use crate::plan::Role;

/// The parts of the reduction kernel, in the order of its source.
impl Gen<'_> {
    /// The helper functions (the tensor-core dots', the finalisation's), then the kernel's signature.
    pub(super) fn functions_and_signature(&mut self, ranged: bool) {
        let layout = self.layout;
        self.prelude(layout.tile, layout.rows);
        if let Some(dots) = &layout.dots {
            dots.functions(&mut self.src, exponentials::in_groups(layout.acc.kind));
        }
        finish::functions(&mut self.src, &layout.acc, self.dtype.c_type());
        if let Some(filter) = &layout.filter {
            filter.functions(&mut self.src, &layout.acc, self.dtype, layout.lists_in_registers);
        }
        self.signature(ranged);
    }

    /// The block's output rows (each thread's, per row slot), its tensor-core dots' set-up and its
    /// shared tile.
    pub(super) fn block_start(&mut self, ranged: bool) {
        let layout = self.layout;
        if ranged {
            self.line("  const int* work = rk_work + 4 * blockIdx.x;");
            self.line("  const int row0 = work[0] + threadIdx.x;\n  const int row_end = work[1];");
        } else {
            self.line("  const int row0 = blockIdx.x * (TILE * ROWS) + threadIdx.x;\n  const int row_end = n_out;");
        }
        for q in 0..layout.rows {
            self.line(&format!(
                "  const int row_{q} = row0 + {q} * TILE; const int r_{q} = row_{q} < row_end ? row_{q} : 0;"
            ));
        }
        if let Some(dots) = &layout.dots {
            self.src.push_str(&dots.block_start());
        }
        if layout.shared {
            let _ = writeln!(self.src, "  __shared__ T tile[{} * {}];", layout.tile_name, layout.shared_width);
        }
        if let Some(filter) = &layout.filter {
            filter.block_start(self);
        }
    }

    /// Per row slot: the registers of the row's inputs and parameters, the numbers (once), the
    /// terms of the row alone, and the reduction's state.
    pub(super) fn rows_start(&mut self, reducer: &Reducer) {
        let (formula, layout) = (self.formula, self.layout);
        let (plan, live) = (&layout.plan, &layout.live);
        for q in 0..layout.rows {
            self.q = q;
            for (id, node) in formula.graph.nodes.iter().enumerate().filter(|&(id, _)| live[id]) {
                match (node.op, plan.roles[id]) {
                    (Op::Input(p), Some(Role::Outer)) => self.input_registers(id, p),
                    (Op::Input(p), Some(Role::Constant)) if q == 0 => self.input_registers(id, p),
                    _ => {}
                }
            }
            if q == 0 {
                for &id in &plan.constant {
                    self.node(id);
                }
            }
            for &id in plan.outer.iter().filter(|&&id| live[id]) {
                self.node(id);
            }
            reducer.init(self);
            if let Some(filter) = &layout.filter {
                filter.row_start(self);
            }
        }
    }

    /// Opens the loop over the ranges of the reduced index (block-sparse) or the block's one chunk,
    /// and the loop over its tiles.
    pub(super) fn reduced_ranges_start(&mut self, ranged: bool) {
        if ranged {
            self.line("  for (int range = work[2]; range < work[3]; range++) {");
            self.line("  const int j_begin = rk_red[2 * range];\n  const int j_end = rk_red[2 * range + 1];");
        } else {
            self.line("  {");
            self.line("  const int j_begin = blockIdx.y * chunk;\n  const int j_end = min(n_red, j_begin + chunk);");
        }
        self.line(&format!("  for (int j0 = j_begin; j0 < j_end; j0 += {}) {{", self.layout.tile_name));
    }

    /// Each thread loads one index of the tile into shared memory: its inputs, or the hoisted terms
    /// computed from them; then the tensor-core dots of the tile.
    pub(super) fn load_tile(&mut self) {
        let (formula, layout) = (self.formula, self.layout);
        let tile_name = layout.tile_name;
        if layout.shared {
            self.line("    {");
            self.line("      const int j = j0 + threadIdx.x;");
            self.line(if layout.dots.is_some() {
                "      if (j < j_end && threadIdx.x < RK_COLUMNS) {"
            } else {
                "      if (j < j_end) {"
            });
            if layout.hoisted_offsets.is_empty() {
                for &p in &layout.inner_vars {
                    let off = layout.shared_offsets[p].unwrap_or(0);
                    let d = formula.variables[p].dim;
                    self.line(&format!("        for (int k = 0; k < {d}; k++) tile[({off} + k) * {tile_name} + threadIdx.x] = rk_load(in{p}[j + (long long)n_red * k]);"));
                }
            } else {
                self.inner_terms();
                for &(id, off) in &layout.hoisted_offsets {
                    let d = formula.graph.dim(id);
                    self.line(&format!("        for (int k = 0; k < {d}; k++) tile[({off} + k) * {tile_name} + threadIdx.x] = v{id}[k];"));
                }
            }
            if let Some(filter) = &layout.filter {
                filter.load_tile(self);
            }
            self.line("      }");
            self.line("    }");
            self.line("    __syncthreads();");
        }
        if let Some(dots) = &layout.dots {
            self.line(&dots.tile());
        }
    }

    /// The loop over the indices of the tile: the terms of the index (from the tile, or computed),
    /// then per row slot the pairs' terms and the reduction's step.
    pub(super) fn loop_over_tile(&mut self, reducer: &Reducer, options: &KernelOptions) {
        let unroll = options.unroll;
        let layout = self.layout;
        if let Some(filter) = &layout.filter {
            return filter.loop_over_tile(self, reducer);
        }
        if exponentials::in_groups(reducer.acc.kind) {
            return exponentials::loop_over_tile(self, reducer, options);
        }
        self.line("    if (row0 < row_end) {");
        self.line(&format!("      const int len = min({}, j_end - j0);", layout.tile_name));
        for q in 0..layout.rows {
            self.q = q;
            reducer.tile_begin(self);
        }
        // Four iterations unrolled. For K-selections in local memory, not unrolling compiles 2 to 3 x
        // faster (10-NN, D = 100: 0.22 against 0.62 s with NVRTC 12.9) but the kernels were slower on an
        // H100 (10-NN, N = 1e6: +16 % at D = 3, +10 % at D = 10; 32-NN D = 64: -13 %): kept.
        // Tuning::unroll (RKEOPS_GPU_UNROLL=n) forces n (benchmarks).
        self.line(&format!("      #pragma unroll {unroll}\n      for (int jj = 0; jj < len; jj++) {{"));
        self.line("        const int j = j0 + jj;");
        self.index_terms();
        for q in 0..layout.rows {
            self.q = q;
            self.pair_nodes();
            reducer.accumulate(self);
        }
        self.line("      }");
        for q in 0..layout.rows {
            self.q = q;
            reducer.tile_end(self);
        }
        self.line("    }");
    }

    /// The terms of the reduced index `j` (tile index `jj`): computed from its inputs, or read
    /// from the tile that holds them.
    pub(super) fn index_terms(&mut self) {
        let layout = self.layout;
        if layout.hoisted_offsets.is_empty() {
            self.inner_terms();
        }
        for &(id, off) in &layout.hoisted_offsets {
            let d = self.formula.graph.dim(id);
            self.line(&format!(
                "        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = tile[({off} + k) * {} + jj];",
                layout.tile_name
            ));
        }
    }

    /// The terms of the pair (row slot `q`, index `j`).
    pub(super) fn pair_nodes(&mut self) {
        let layout = self.layout;
        for &id in layout.plan.pair.iter().filter(|&&id| layout.live[id]) {
            self.node(id);
        }
    }

    /// Closes the loops over the tiles and over the ranges (or the chunk).
    pub(super) fn reduced_ranges_end(&mut self) {
        if self.layout.shared {
            self.line("    __syncthreads();");
        }
        self.line("  }");
        self.line("  }");
    }

    /// The state of a row, either finalised here (one chunk) or stored for rkeops_merge.
    pub(super) fn store_rows(&mut self, reducer: &Reducer) {
        let state_len = self.layout.acc.state_len();
        for q in 0..self.layout.rows {
            self.q = q;
            self.line(&format!("  if (row_{q} < row_end) {{"));
            self.line(&format!("    if (finalize) {{\n    double out[{state_len}];"));
            reducer.store(self);
            self.line(&format!("    rk_finalize(out, out_values, out_indices, row_{q}, n_out);\n    }} else {{"));
            self.line(&format!("    double* out = states + ((long long)blockIdx.y * n_out + row_{q}) * {state_len};"));
            reducer.store(self);
            self.line("    }\n  }");
        }
        self.line("}");
    }
}

impl Gen<'_> {
    /// The terms of the reduced index alone for its index `j`: its inputs, from the shared tile
    /// when it holds them, else from global memory, then the nodes computed from them.
    fn inner_terms(&mut self) {
        let layout = self.layout;
        let live = &layout.live;
        for (id, node) in self.formula.graph.nodes.iter().enumerate().filter(|&(id, _)| live[id]) {
            if let (Op::Input(p), Some(Role::Inner)) = (node.op, layout.plan.roles[id]) {
                let d = node.dim;
                let line = match layout.shared_offsets[p] {
                    Some(off) => format!("        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = tile[({off} + k) * {} + jj];", layout.tile_name),
                    None => format!("        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = rk_load(in{p}[j + (long long)n_red * k]);"),
                };
                self.line(&line);
            }
        }
        for &id in layout.plan.inner.iter().filter(|&&id| live[id]) {
            self.node(id);
        }
    }

    /// Registers of an input that does not vary with the reduced index (parameter or output row).
    fn input_registers(&mut self, id: NodeId, p: usize) {
        let d = self.formula.graph.dim(id);
        let index = match self.formula.variables[p].category {
            Category::Param => "k".to_string(),
            _ => format!("r_{} + (long long)n_out * k", self.q),
        };
        let v = self.name(id);
        self.line(&format!("  T {v}[{d}]; for (int k = 0; k < {d}; k++) {v}[k] = rk_load(in{p}[{index}]);"));
    }
}
