//! How many vectors a store loop computes per iteration (`llvm.loop.interleave.count`, set by
//! `Emitter::store_loop` in `stream.rs`), from what its body costs.
//!
//! The loop vectoriser writes each instruction out for that many vectors side by side, so the
//! CPU has independent work while one vector's chain of dependent instructions waits on its
//! latencies: [`JitOptions::interleave_vectors`](crate::llvm::JitOptions) (four by default)
//! for every store loop, and twice that for a long body with few constants
//! ([`vectors_in_flight`]). Every element is computed by the same instructions either way, so
//! values do not change.

use inkwell::basic_block::BasicBlock;
use inkwell::types::AnyTypeEnum;
use inkwell::values::{BasicValueEnum, FunctionValue, InstructionOpcode as O, Operand};
use std::collections::HashSet;

/// A store loop body's float operations (arithmetic, comparisons, selects and calls with a
/// float result) and distinct float constants, `nested` when it holds another loop (which the
/// loop vectoriser, for innermost loops only, leaves alone anyway).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BodyCost {
    pub ops: usize,
    pub constants: usize,
    pub nested: bool,
}

/// Float operations from which a store loop body counts as long: its dependency chain is then
/// long enough that more vectors in flight hide more of its latency. The elementwise chain
/// (`tanh` and five ops) has 38, `tanh` alone 30, `exp` 15.
pub(crate) const LONG_BODY_OPS: usize = 24;

/// The vectors a store loop computes per iteration: `n` (`JitOptions::interleave_vectors`),
/// or twice that for a long body ([`LONG_BODY_OPS`]) whose constants and two live values per
/// vector fit the target's `registers` vector registers (32 with AVX-512, else 16): each
/// constant is one register for the whole loop, and past the register file the copies spill.
/// On the AMD EPYC host, eight vectors made the elementwise chain (15 constants) 3–4% faster,
/// and exact GELU (`erf`, 30 constants), layer_norm and permute-add slower (BENCHMARKS.md).
/// Each element is computed by the same instructions whatever the count.
pub(crate) fn vectors_in_flight(n: u32, cost: BodyCost, registers: usize) -> u32 {
    let doubled = 2 * n as usize;
    if !cost.nested && cost.ops >= LONG_BODY_OPS && cost.constants + 2 * doubled <= registers {
        2 * n
    } else {
        n
    }
}

/// The [`BodyCost`] of the loop whose blocks `function` has after `before` (its first block,
/// if `None`): the blocks a loop emitted there appended.
pub(crate) fn body_cost(function: FunctionValue<'_>, before: Option<BasicBlock<'_>>) -> BodyCost {
    let mut cost = BodyCost::default();
    let mut constants = HashSet::new();
    let mut block = match before {
        Some(b) => b.get_next_basic_block(),
        None => function.get_first_basic_block(),
    };
    let mut first = true;
    while let Some(bb) = block {
        let mut next = bb.get_first_instruction();
        while let Some(inst) = next {
            let float = matches!(inst.get_type(), AnyTypeEnum::FloatType(_));
            let counted = match inst.get_opcode() {
                O::FAdd | O::FSub | O::FMul | O::FDiv | O::FRem | O::FNeg | O::FCmp => true,
                O::Call | O::Select => float,
                // A loop header other than this loop's own.
                O::Phi => {
                    cost.nested |= !first;
                    false
                }
                _ => false,
            };
            if counted {
                cost.ops += 1;
                for k in 0..inst.get_num_operands() {
                    if let Some(Operand::Value(BasicValueEnum::FloatValue(f))) = inst.get_operand(k)
                    {
                        if let Some((v, _)) = f.get_constant() {
                            constants.insert(v.to_bits());
                        }
                    }
                }
            }
            next = inst.get_next_instruction();
        }
        first = false;
        block = bb.get_next_basic_block();
    }
    cost.constants = constants.len();
    cost
}

#[cfg(test)]
mod tests {
    use super::{vectors_in_flight, BodyCost, LONG_BODY_OPS};

    fn cost(ops: usize, constants: usize) -> BodyCost {
        BodyCost {
            ops,
            constants,
            nested: false,
        }
    }

    /// The bodies the rule was measured on (their counts from `body_cost` on `smelt bench`'s
    /// kernels): the elementwise chain doubles on AVX-512 only; exact GELU's 30 constants,
    /// `exp`'s short body and a loop holding another loop keep the given count.
    #[test]
    fn long_bodies_with_few_constants_double() {
        let chain = cost(38, 15);
        assert_eq!(vectors_in_flight(4, chain, 32), 8);
        assert_eq!(vectors_in_flight(4, chain, 16), 4);
        assert_eq!(vectors_in_flight(4, cost(30, 11), 32), 8, "tanh alone");
        assert_eq!(vectors_in_flight(4, cost(40, 30), 32), 4, "gelu");
        assert_eq!(vectors_in_flight(4, cost(15, 12), 32), 4, "exp");
        assert_eq!(vectors_in_flight(4, cost(1, 0), 32), 4, "add");
        let nested = BodyCost {
            nested: true,
            ..chain
        };
        assert_eq!(vectors_in_flight(4, nested, 32), 4);
        // The edges: as many constants as leave two registers per vector, and the shortest
        // long body.
        assert_eq!(vectors_in_flight(4, cost(LONG_BODY_OPS, 16), 32), 8);
        assert_eq!(vectors_in_flight(4, cost(LONG_BODY_OPS, 17), 32), 4);
        assert_eq!(vectors_in_flight(4, cost(LONG_BODY_OPS - 1, 0), 32), 4);
        assert_eq!(vectors_in_flight(2, cost(LONG_BODY_OPS, 24), 32), 4);
        assert_eq!(vectors_in_flight(1, chain, 32), 2);
    }
}
