//! Transposed reads in tiles ([`JitOptions::tile_transposes`], on by default).
//!
//! An elementwise kernel walks its output row by row, the last outer dim innermost. An operand
//! read transposed (`x + y.T`: stride 1 along the second-to-last outer dim, a cache line or
//! more along the last) is then read one element per cache line, each line touched again
//! only a whole output row later: the vectoriser makes a gather of sixteen lines, in an order
//! no hardware prefetcher follows. Measured on the 2-core Intel host before this module:
//! `x + y.T` over 2048 x 3072 floats in 26 ms (under 3 GB/s), where the same add without the
//! transpose takes 1.3 ms (BENCHMARKS.md).
//!
//! Such a kernel computes `side x side` tiles instead ([`side`]: 16, or 8 for 8-byte
//! elements): `side` consecutive output rows (points of the second-to-last outer dim, with
//! the same outer dims before it), `side` columns at a time. For each tile, every transposed
//! operand's part is loaded as `side` vectors, one per column (each a contiguous run of the
//! operand's row), transposed in registers by `log2(side)` rounds of interleaving shuffles
//! ([`transpose`]) and stored to a tile on the stack, row by row; then the kernel body runs
//! over the tile's rows and columns, its loads of those operands served by the stack tile
//! (`Emitter::address`), its other accesses as before. So every operand is read, and the
//! output written, a whole vector at a time, and each cache line of the transposed operand
//! is used whole by one tile. Columns past the last whole tile, and rows that do not make a
//! whole tile (at a chunk's ends and at the end of the second-to-last dim), are computed as
//! before, one element at a time along the row. Every output element is computed by the same
//! body from the same values, so results are the same bits with and without tiles.
//!
//! The tiles' loads of the transposed operand carry [`TILE_LOAD`], so that the module-wide
//! prefetches (`prefetch.rs`), which request the line `prefetch_bytes` further along a load's
//! own row, leave them alone: here that line is used only some thousand tiles later. A
//! kernel that tiles does not stream its stores (`streaming_stores` in `kernel.rs`).

use super::{reduce, Emitter, Hint, LoopHints, LANE_LOOP};
use crate::llvm::error::Result;
#[allow(unused_imports)] // named by the module docs
use crate::llvm::options::JitOptions;
use inkwell::types::BasicType;
use inkwell::values::{BasicValue, IntValue, PointerValue, VectorValue};
use inkwell::AddressSpace;
use smelt_passes::kernel::{Access, BufferDecl, BufferId, Kernel};

/// The metadata kind marking a tile's loads of a transposed operand (see the module docs).
pub(crate) const TILE_LOAD: &str = "smelt.tile.load";

/// The smallest stride along the last outer dim, in bytes, of a read that tiles serve: a
/// cache line, so that each element of an output row is read from a line of its own.
const LINE: u64 = 64;

/// Loop hints for a tile's column loop: one vector of `side` lanes, which then runs once and
/// is unrolled away. For 16 lanes these are a split reduction's lane-loop hints
/// ([`LANE_LOOP`]). Before vectorising, the column loop must stay a loop: fully unrolled, it
/// left the row loop innermost, and the vectoriser widened that one, into gathers and
/// scatters down the tile's columns.
fn col_hints(side: u32) -> LoopHints {
    const _: () = assert!(reduce::LANES == 16, "LANE_LOOP must be 16 lanes wide");
    const COL_8: LoopHints = &[
        ("llvm.loop.vectorize.enable", Hint::Bool(true)),
        ("llvm.loop.vectorize.width", Hint::Int(8)),
        (
            "llvm.loop.vectorize.followup_vectorized",
            Hint::Followup("llvm.loop.unroll.full"),
        ),
    ];
    if side == 8 {
        COL_8
    } else {
        LANE_LOOP
    }
}

/// Loop hints for a tile's row loop: not to be vectorised (see [`col_hints`]).
const ROW_HINTS: LoopHints = &[("llvm.loop.vectorize.enable", Hint::Bool(false))];

/// The side of a square tile of elements of `size` bytes: 16 (an AVX-512 vector of f32 per
/// tile row), 8 for 8-byte elements.
pub(crate) fn side(size: usize) -> u32 {
    if size >= 8 {
        8
    } else {
        16
    }
}

/// What a kernel that computes tiles needs: the tiles' side and the transposed reads, each a
/// distinct (buffer, access).
#[derive(Clone, Debug)]
pub(crate) struct Tiling {
    pub side: u32,
    pub reads: Vec<(BufferId, Access)>,
}

/// Whether `kernel` computes tiles (see [`tiling`]).
pub(crate) fn tiles(kernel: &Kernel, buffers: &[BufferDecl]) -> bool {
    tiling(kernel, buffers).is_some()
}

/// The tiling of `kernel`, if it computes tiles: an elementwise kernel that loads at least one
/// operand transposed, a cache line ([`LINE`]) or more along the last outer dim
/// (`crate::transposed::transposed_reads`), and whose last two outer dims hold at least one
/// whole tile.
pub(crate) fn tiling(kernel: &Kernel, buffers: &[BufferDecl]) -> Option<Tiling> {
    let dtype = |b: BufferId| buffers.get(b.0 as usize).map(|d| d.dtype);
    let reads = crate::transposed::transposed_reads(kernel, dtype, LINE)?;
    let size = reads
        .iter()
        .filter_map(|(b, _)| dtype(*b))
        .map(|d| d.size_bytes())
        .max()?;
    let side = side(size);
    let n = kernel.outer.len();
    let holds = |d: usize| kernel.outer[d] >= side as usize;
    (holds(n - 1) && holds(n - 2)).then_some(Tiling { side, reads })
}

impl<'a, 'ctx> Emitter<'a, 'ctx> {
    /// The stack tiles of `tiling`'s reads, one `[side * side x T]` array each on a cache
    /// line, allocated at the builder (the entry block).
    pub(crate) fn tile_scratch(&self, tiling: &Tiling) -> Result<Vec<PointerValue<'ctx>>> {
        let n = tiling.side * tiling.side;
        tiling
            .reads
            .iter()
            .map(|(buffer, _)| {
                let (_, decl) = self.buffer(*buffer)?;
                let ty = super::storage_type(self.ctx, decl.dtype);
                let p = self.b.build_alloca(ty.array_type(n), "tile")?;
                reduce::set_alignment(p, LINE as u32)?;
                Ok(p)
            })
            .collect()
    }

    /// Inside a tile's body, the element of the stack tile that serves `buffer` at `access`,
    /// if it is one of the transposed reads.
    pub(crate) fn tile_address(
        &self,
        buffer: BufferId,
        access: &Access,
    ) -> Result<Option<PointerValue<'ctx>>> {
        let (Some((row, col)), Some(tiling)) = (self.tile_at, &self.tiling) else {
            return Ok(None);
        };
        let Some(i) = tiling
            .reads
            .iter()
            .position(|(b, a)| *b == buffer && a == access)
        else {
            return Ok(None);
        };
        let side = self.i64c(i64::from(tiling.side));
        let at = self.b.build_int_nsw_mul(row, side, "trow")?;
        let at = self.b.build_int_nsw_add(at, col, "tel")?;
        let zero = self.ctx.i64_type().const_zero();
        // SAFETY (of the generated code): `row` and `col` are a tile's loop variables, both
        // below `side`, so the element lies inside the `side * side` array.
        Ok(Some(unsafe {
            self.b
                .build_in_bounds_gep(self.tile_ptrs[i], &[zero, at], "tp")?
        }))
    }

    /// `side` full rows from the one whose outer indices are `prefix` (its second-to-last
    /// outer index the tile's first row; the rows share the dims before it): whole tiles along
    /// the last outer dim, then the columns past them one element at a time.
    pub(crate) fn tiled_rows(&mut self, prefix: &[IntValue<'ctx>]) -> Result<()> {
        let Some(tiling) = self.tiling.clone() else {
            return Err(self.err("tiled rows without a tiling"));
        };
        let side = u64::from(tiling.side);
        let outer = self.kernel.outer.clone();
        let cols = outer[outer.len() - 1] as u64;
        let whole = cols / side;
        let (head, first_row) = prefix.split_at(prefix.len() - 1);
        let (head, first_row) = (head.to_vec(), first_row[0]);
        let zero = self.i64c(0);
        let side_c = self.i64c(side as i64);
        self.counted_loop(zero, self.i64c(whole as i64), "tile", |em, t| {
            let j0 = em.b.build_int_nsw_mul(t, side_c, "tj")?;
            for (i, (buffer, access)) in tiling.reads.iter().enumerate() {
                em.fill_tile(*buffer, access, prefix, j0, tiling.side, i)?;
            }
            em.counted_loop_hinted(zero, side_c, "tile.row", ROW_HINTS, |em, r| {
                let row = em.b.build_int_nsw_add(first_row, r, "trow")?;
                em.counted_loop_hinted(zero, side_c, "tile.col", col_hints(tiling.side), |em, c| {
                    let col = em.b.build_int_nsw_add(j0, c, "tcol")?;
                    em.vars.clone_from(&head);
                    em.vars.extend([row, col]);
                    em.tile_at = Some((r, c));
                    let done = em.point();
                    em.tile_at = None;
                    done
                })
            })
        })?;
        if !cols.is_multiple_of(side) {
            let (lo, hi) = (self.i64c((whole * side) as i64), self.i64c(cols as i64));
            self.counted_loop(zero, side_c, "tail.row", |em, r| {
                let row = em.b.build_int_nsw_add(first_row, r, "trow")?;
                em.counted_loop(lo, hi, "tail.col", |em, col| {
                    em.vars.clone_from(&head);
                    em.vars.extend([row, col]);
                    em.point()
                })
            })?;
        }
        Ok(())
    }

    /// Fills stack tile `i` with the tile of `buffer` at `access` whose first row is
    /// `prefix`'s and whose first column is `j0`: `side` vector loads along the operand's rows
    /// (the tile's columns), transposed, stored as the tile's rows.
    fn fill_tile(
        &mut self,
        buffer: BufferId,
        access: &Access,
        prefix: &[IntValue<'ctx>],
        j0: IntValue<'ctx>,
        side: u32,
        i: usize,
    ) -> Result<()> {
        let size = self.buffer(buffer)?.1.dtype.size_bytes() as u32;
        let lane = match size {
            1 => self.ctx.i8_type(),
            2 => self.ctx.i16_type(),
            4 => self.ctx.i32_type(),
            _ => self.ctx.i64_type(),
        };
        let lanes = lane.vec_type(side);
        let vptr = lanes.ptr_type(AddressSpace::default());
        let mark = self.ctx.get_kind_id(TILE_LOAD);
        let marker = self.ctx.metadata_node(&[]);
        let mut columns = Vec::with_capacity(side as usize);
        for c in 0..side {
            let col = self
                .b
                .build_int_nsw_add(j0, self.i64c(i64::from(c)), "fc")?;
            self.vars = prefix.to_vec();
            self.vars.push(col);
            let (p, _, _) = self.address(buffer, access)?;
            let p = self.b.build_pointer_cast(p, vptr, "fcp")?;
            let v = self.b.build_load(p, "fcol")?;
            reduce::set_alignment(v, size)?;
            if let Some(inst) = v.as_instruction_value() {
                inst.set_metadata(marker, mark)
                    .map_err(|e| self.err(format!("marking a tile load: {e}")))?;
            }
            columns.push(v.into_vector_value());
        }
        let rows = transpose(self, columns)?;
        let zero = self.ctx.i64_type().const_zero();
        for (r, v) in rows.into_iter().enumerate() {
            let at = self.i64c(r as i64 * i64::from(side));
            // SAFETY (of the generated code): row `r < side` of the `side * side` array.
            let p = unsafe {
                self.b
                    .build_in_bounds_gep(self.tile_ptrs[i], &[zero, at], "trp")?
            };
            let p = self.b.build_pointer_cast(p, vptr, "trv")?;
            let st = self.b.build_store(p, v)?;
            st.set_alignment((size * side).min(LINE as u32))
                .map_err(|e| self.err(format!("tile store alignment: {e}")))?;
        }
        Ok(())
    }
}

/// The transpose of the square matrix whose rows are `rows` (`side` vectors of `side` lanes,
/// `side` a power of two): `log2(side)` rounds, each of which interleaves row `i` with row
/// `i + side/2` into rows `2i` (their first halves) and `2i + 1` (their second halves).
/// One round moves element `(r, c)` to the position whose index bits (row bits, then column
/// bits) are `(r, c)`'s rotated left by one; after `log2(side)` rounds they are rotated by
/// half their length, to `(c, r)`.
fn transpose<'ctx>(
    em: &Emitter<'_, 'ctx>,
    mut rows: Vec<VectorValue<'ctx>>,
) -> Result<Vec<VectorValue<'ctx>>> {
    let side = rows.len() as u32;
    let half = side / 2;
    let i32t = em.ctx.i32_type();
    let mask = |from: u32| {
        let lanes: Vec<IntValue> = (0..half)
            .flat_map(|k| [from + k, side + from + k])
            .map(|l| i32t.const_int(u64::from(l), false))
            .collect();
        inkwell::types::VectorType::const_vector(&lanes)
    };
    let (first, second) = (mask(0), mask(half));
    for _ in 0..side.trailing_zeros() {
        let mut next = Vec::with_capacity(rows.len());
        for i in 0..half as usize {
            let (a, b) = (rows[i], rows[i + half as usize]);
            next.push(em.b.build_shuffle_vector(a, b, first, "tlo")?);
            next.push(em.b.build_shuffle_vector(a, b, second, "thi")?);
        }
        rows = next;
    }
    Ok(rows)
}
