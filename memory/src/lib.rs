#![doc = include_str!("../README.md")]

pub mod bit_reverse;
pub mod budget;
pub mod huge_pages;
pub mod layout;
pub mod ledger;
pub mod pins;
pub mod plan;
pub mod residency;

pub use bit_reverse::{bit_reverse, bit_reverse16};
pub use budget::{
    Budget, BudgetConfig, BudgetError, Bytes, CapacitySource, Deficit, DeficitInputs, DriverMemory,
    DriverReading, GIB, MIB, compute_deficit, gib, resolve_capacity,
};
pub use layout::{Layout, LayoutConfig, LayoutError, MAX_PAGES, TensorSlot};
pub use ledger::{AllocId, Ledger, LedgerError, OwnerClass};
pub use pins::{
    CopySource, FakeRam, PinAction, PinConfig, PinDecision, PinError, PinPolicy, PinTier,
    ProcMeminfo, RamReading, RamSource, WeightKey,
};
pub use plan::{Plan, PlanError, PlanRoom, PlannedTensor, plan, plan_ranked};
pub use residency::{
    ModelId, PageId, PassPlan, Placement, Residency, ResidencyError, ResidencyStats,
};
