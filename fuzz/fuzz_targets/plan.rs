//! The model planner (`runtime::planning::plan_model`, over `memory::plan`)
//! on fuzzed weight sizes, blocks, budgets and scratch. A plan it returns
//! must fit: resident pages + two arenas + scratch within the usable bytes,
//! and every byte is either resident or streamed.
#![no_main]

use dynvram_runtime::planning::{ARENAS, PlanWeight, arena_layout, part_capacity, plan_model};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Debug, Arbitrary)]
struct Input {
    weights: Vec<(u64, u8)>,
    usable: u64,
    scratch: u64,
    /// Spreads sizes over every magnitude a u64 has.
    size_shift: u8,
}

fuzz_target!(|input: Input| {
    // Sizes of every magnitude, petabytes too: layouts past
    // `memory::MAX_PAGES` pages are refused before anything is allocated.
    let shift = u32::from(input.size_shift % 64);
    let mut block = 0usize;
    let weights: Vec<PlanWeight> = input
        .weights
        .iter()
        .take(256)
        .enumerate()
        .map(|(i, &(size, step))| {
            block += usize::from(step % 3 == 0);
            PlanWeight {
                name: format!("w{i}"),
                size: size >> shift,
                block,
                group: usize::from(step % 2),
            }
        })
        .collect();
    let Ok(p) = plan_model(&weights, input.usable, input.scratch) else {
        return;
    };
    assert_eq!(p.plan.tensors.len(), weights.len());
    let total: u128 = weights.iter().map(|w| u128::from(w.size)).sum();
    assert_eq!(
        u128::from(p.plan.resident_bytes) + u128::from(p.plan.streamed_bytes),
        total
    );
    let need = arena_layout(&weights, |i| p.streamed(i), part_capacity(&p)).fill;
    assert!(
        p.arena_bytes >= need,
        "arena {} < need {need}",
        p.arena_bytes
    );
    let used = u128::from(p.plan.page_bytes)
        + u128::from(ARENAS) * u128::from(p.arena_bytes)
        + u128::from(p.scratch);
    assert!(used <= u128::from(p.usable), "{used} > {}: {p:?}", p.usable);
});
