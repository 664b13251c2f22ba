//! Property tests of residency + budget over random sequences of
//! register / run / unload / budget change (issue 4), no GPU.

use std::collections::HashMap;
use std::time::Instant;

use dynvram_memory::{
    AllocId, Budget, BudgetConfig, CapacitySource, LayoutConfig, ModelId, OwnerClass, PageId,
    Placement, PlanRoom, Residency, plan,
};
use proptest::prelude::*;

const PAGE: u64 = 1000;

fn layout() -> LayoutConfig {
    LayoutConfig {
        page_size: PAGE,
        align: 8,
        tiny_threshold: 16,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Register(Vec<u64>),
    Run(usize),
    Unload(usize),
    Capacity(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => prop::collection::vec(prop_oneof![1u64..16, 100u64..1000, 1000u64..3500], 1..12).prop_map(Op::Register),
        6 => (0usize..8).prop_map(Op::Run),
        1 => (0usize..8).prop_map(Op::Unload),
        1 => (3000u64..20_000).prop_map(Op::Capacity),
    ]
}

/// Runtime stand-in: the budget's ledger holds one allocation per resident page.
struct Sim {
    budget: Budget,
    res: Residency,
    pages: HashMap<PageId, AllocId>,
    models: Vec<ModelId>,
    now: Instant,
}

impl Sim {
    fn free_pages(&mut self, evicted: &[PageId]) {
        for p in evicted {
            let id = self.pages.remove(p).expect("evicted page was resident");
            self.budget.free(id).expect("page in ledger");
        }
    }

    fn check(&self) {
        let usable = self.budget.usable();
        assert!(
            self.budget.ledger().total() <= usable,
            "tracked {} > usable {usable}",
            self.budget.ledger().total()
        );
        assert!(self.res.used() <= self.res.limit());
        assert_eq!(
            self.budget.ledger().loaded_vram(),
            self.res.used(),
            "ledger and residency agree"
        );
        let sum: u64 = self
            .models
            .iter()
            .map(|&m| self.res.resident_bytes(m).unwrap())
            .sum();
        assert_eq!(sum, self.res.used());
    }
}

/// Evicted pages follow the eviction order: models lowest priority first (the
/// active model last), top page first inside a model, and a later model is only
/// touched once every earlier one is empty.
fn check_eviction_order(order_before: &[ModelId], evicted: &[PageId], res: &Residency) {
    let rank = |m: ModelId| {
        order_before
            .iter()
            .position(|&x| x == m)
            .expect("evicted model known")
    };
    for w in evicted.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.model == b.model {
            assert!(
                a.page > b.page,
                "top page first within {:?}: {evicted:?}",
                a.model
            );
        } else {
            assert!(
                rank(a.model) < rank(b.model),
                "lower priority first: {evicted:?} order {order_before:?}"
            );
        }
    }
    if let Some(last) = evicted.last() {
        for &m in &order_before[..rank(last.model)] {
            if let Ok(w) = res.watermark(m) {
                assert_eq!(
                    w, 0,
                    "{m} still resident while a higher-priority model was evicted"
                );
            }
        }
    }
}

fn run_ops(ops: Vec<Op>, capacity: u64, reserve: u64, headroom: u64, scratch: u64) {
    let cfg = BudgetConfig {
        vram_budget: Some(capacity),
        reserve,
        headroom,
    };
    let Ok(mut budget) = Budget::new(capacity, CapacitySource::Explicit, cfg) else {
        return;
    };
    let now = Instant::now();
    if budget.allocate(OwnerClass::Scratch, scratch, now).is_err() {
        return;
    }
    let limit = budget.weights_limit(now);
    let mut sim = Sim {
        budget,
        res: Residency::new(layout(), limit).unwrap(),
        pages: HashMap::new(),
        models: vec![],
        now,
    };
    // Per model: fully resident after its last run and not evicted since.
    let mut intact: HashMap<ModelId, bool> = HashMap::new();
    for op in ops {
        match op {
            Op::Register(sizes) => {
                let m = sim.res.register(&sizes).unwrap();
                sim.models.push(m);
                assert_eq!(
                    sim.res.priority().last(),
                    Some(&m),
                    "registering puts a model on top"
                );
            }
            Op::Run(i) if !sim.models.is_empty() => {
                let m = sim.models[i % sim.models.len()];
                // The running model is skipped: it goes on top before anything is evicted.
                let order: Vec<ModelId> = sim
                    .res
                    .eviction_order()
                    .into_iter()
                    .filter(|&x| x != m)
                    .collect();
                let free_before = sim.res.limit() - sim.res.used();
                let old_w = sim.res.watermark(m).unwrap();
                let plan = sim.res.begin_pass(m).unwrap();
                assert_eq!(
                    sim.res.priority().last(),
                    Some(&m),
                    "running puts a model on top"
                );
                assert!(
                    plan.evict.iter().all(|p| p.model != m),
                    "a pass never evicts its own model"
                );
                check_eviction_order(&order, &plan.evict, &sim.res);
                let layout = sim.res.layout(m).unwrap().clone();
                let need =
                    layout.prefix[plan.resident_pages.end as usize] - layout.prefix[old_w as usize];
                assert!(
                    plan.evict.is_empty() || need > free_before,
                    "evicted without need"
                );
                // Exhaustion prediction: the watermark is the highest that fits the whole limit.
                assert_eq!(
                    plan.resident_pages.end,
                    layout.max_watermark_within(sim.res.limit()).max(old_w)
                );
                if intact.get(&m) == Some(&true) {
                    assert!(
                        plan.tensors.iter().all(|&p| p == Placement::Resident),
                        "fitting model reloaded"
                    );
                    assert!(plan.load_pages.is_empty());
                }
                for e in &plan.evict {
                    intact.insert(e.model, false);
                }
                sim.free_pages(&plan.evict);
                // Load the new pages; the budget must accept each one.
                for page in plan.load_pages.clone() {
                    let bytes = layout.pages[page as usize];
                    let id = sim
                        .budget
                        .allocate(OwnerClass::Weights, bytes, sim.now)
                        .expect("planned page fits the budget");
                    sim.pages.insert(PageId { model: m, page }, id);
                }
                // Loaded pages are those the pass uses; nothing of this pass is evicted by it.
                for (t, slot) in layout.tensors.iter().enumerate() {
                    let resident = slot.last_page < plan.resident_pages.end;
                    assert_eq!(plan.tensors[t] != Placement::Stream, resident);
                }
                intact.insert(m, plan.resident_pages.end == layout.page_count());
            }
            Op::Unload(i) if !sim.models.is_empty() => {
                let m = sim.models.remove(i % sim.models.len());
                let pages = sim.res.unload(m).unwrap();
                sim.free_pages(&pages);
                intact.remove(&m);
            }
            Op::Capacity(c) => {
                if sim
                    .budget
                    .set_capacity(c, CapacitySource::Explicit)
                    .is_err()
                {
                    continue;
                }
                let order = sim.res.eviction_order();
                let limit = sim.budget.weights_limit(sim.now);
                let evicted = sim.res.set_limit(limit);
                check_eviction_order(&order, &evicted, &sim.res);
                for e in &evicted {
                    intact.insert(e.model, false);
                }
                sim.free_pages(&evicted);
            }
            _ => {}
        }
        sim.check();
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn random_sequences_keep_every_invariant(
        ops in prop::collection::vec(op(), 1..40),
        capacity in 3000u64..20_000,
        reserve in 0u64..1000,
        headroom in 0u64..1000,
        scratch in 0u64..1500,
    ) {
        run_ops(ops, capacity, reserve, headroom, scratch);
    }

    /// When everything fits, nothing is ever evicted or loaded twice.
    #[test]
    fn models_that_fit_are_never_evicted(
        models in prop::collection::vec(prop::collection::vec(1u64..2500, 1..8), 1..5),
        runs in prop::collection::vec(0usize..5, 1..30),
    ) {
        let total: u64 = models.iter().map(|s| dynvram_memory::Layout::new(s, &layout()).unwrap().total_bytes()).sum();
        let mut res = Residency::new(layout(), total).unwrap();
        let ids: Vec<ModelId> = models.iter().map(|s| res.register(s).unwrap()).collect();
        let mut ran = vec![false; ids.len()];
        for r in runs {
            let i = r % ids.len();
            let p = res.begin_pass(ids[i]).unwrap();
            prop_assert!(p.evict.is_empty());
            prop_assert_eq!(p.bytes_streamed, 0);
            prop_assert_eq!(ran[i], p.load_pages.is_empty() && !p.tensors.is_empty(), "loads only on the first run");
            ran[i] = true;
        }
        prop_assert_eq!(res.stats().pages_evicted, 0);
    }

    /// The standalone plan and a single-model residency agree.
    #[test]
    fn plan_matches_single_model_residency(
        sizes in prop::collection::vec(prop_oneof![1u64..16, 100u64..1000, 1000u64..3500], 1..20),
        usable in 0u64..20_000,
    ) {
        let named: Vec<(String, u64)> = sizes.iter().enumerate().map(|(i, &s)| (format!("t{i}"), s)).collect();
        let p = plan(&named, PlanRoom { usable, scratch: 0, arenas: 0 }, &layout()).unwrap();
        let mut res = Residency::new(layout(), usable).unwrap();
        let m = res.register(&sizes).unwrap();
        let pass = res.begin_pass(m).unwrap();
        prop_assert_eq!(p.pages_resident, pass.resident_pages.end);
        prop_assert_eq!(p.streamed_bytes, pass.bytes_streamed);
        for (t, placed) in p.tensors.iter().zip(&pass.tensors) {
            let expect = if *placed == Placement::Stream { Placement::Stream } else { Placement::Resident };
            prop_assert_eq!(t.placement, expect);
        }
        prop_assert!(p.page_bytes <= usable);
    }
}

#[test]
fn eviction_takes_lowest_priority_top_page_and_active_last() {
    let mut res = Residency::new(layout(), 6000).unwrap();
    let a = res.register(&[1000, 1000, 1000]).unwrap();
    let b = res.register(&[1000, 1000, 1000]).unwrap();
    assert!(res.begin_pass(a).unwrap().evict.is_empty());
    assert!(res.begin_pass(b).unwrap().evict.is_empty());
    // c is registered last (top of the list) but b ran last: evict a first (lowest), then c, b last.
    let c = res.register(&[1000]).unwrap();
    assert_eq!(res.eviction_order(), vec![a, c, b]);
    let evicted = res.set_limit(2500);
    let pages: Vec<(u32, u32)> = evicted.iter().map(|p| (p.model.0, p.page)).collect();
    assert_eq!(pages, vec![(0, 2), (0, 1), (0, 0), (1, 2)]);
    assert_eq!(res.watermark(b).unwrap(), 2);
    // Running a: only the 500 B free + b's pages are available; the prefix check keeps a at 2 pages.
    let p = res.begin_pass(a).unwrap();
    assert_eq!(p.resident_pages, 0..2);
    assert_eq!(
        p.evict,
        vec![PageId { model: b, page: 1 }, PageId { model: b, page: 0 }]
    );
    assert_eq!(
        p.tensors,
        vec![Placement::Load, Placement::Load, Placement::Stream]
    );
}
