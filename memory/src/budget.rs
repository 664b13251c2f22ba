//! The VRAM budget: capacity, reserve, headroom and the deficit rule (docs/behaviour.md, Budget).
//!
//! Plain numbers in, a decision out. The driver figure comes through the
//! [`DriverMemory`] trait and the clock is a parameter (`now`), so tests
//! neither need a GPU nor sleep.

use std::fmt;
use std::time::{Duration, Instant};

use crate::ledger::{AllocId, Ledger, LedgerError, OwnerClass};

/// One GiB, the unit of the `--reserve-vram`, `--vram-headroom` and `--vram-budget` flags.
pub const GIB: u64 = 1 << 30;
/// One MiB.
pub const MIB: u64 = 1 << 20;
/// Default `--reserve-vram`: 0.25 GiB *(aimdo's simple headroom, 256 MiB)*.
pub const DEFAULT_RESERVE: u64 = 256 * MIB;
/// The driver is polled at most this often *(aimdo)*.
pub const DRIVER_POLL_INTERVAL: Duration = Duration::from_secs(2);

/// A byte count for messages: binary units with two decimals above 1 KiB
/// (`1.50 GiB`, `256.00 MiB`), plain bytes below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let b = self.0;
        if b < 1024 {
            return write!(f, "{b} B");
        }
        let mut v = b as f64 / 1024.0;
        let mut unit = 0;
        while v >= 1024.0 && unit + 1 < UNITS.len() {
            v /= 1024.0;
            unit += 1;
        }
        write!(f, "{v:.2} {}", UNITS[unit])
    }
}

/// Budget errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// A GiB flag value that is negative, NaN, infinite or too large.
    #[error("{flag} = {value} GiB is not a valid size (must be finite, >= 0 and < 2^34 GiB)")]
    InvalidGib {
        /// The flag or field name.
        flag: &'static str,
        /// The value given.
        value: f64,
    },
    /// Reserve plus headroom leave nothing of the capacity.
    #[error(
        "capacity {} ({source_name}) minus reserve {} and headroom {} leaves no VRAM to use",
        Bytes(*capacity), Bytes(*reserve), Bytes(*headroom)
    )]
    NoUsableVram {
        /// Capacity in bytes.
        capacity: u64,
        /// Where the capacity came from.
        source_name: CapacitySource,
        /// `--reserve-vram` in bytes.
        reserve: u64,
        /// `--vram-headroom` in bytes.
        headroom: u64,
    },
    /// A new capacity would leave less than the non-weight buffers already hold
    /// (scratch, arenas, patches cannot be evicted): free those first.
    #[error(
        "capacity {} leaves {} usable, below the {} held by scratch, arenas and patches",
        Bytes(*capacity), Bytes(*usable), Bytes(*held)
    )]
    CapacityTooSmall {
        /// Capacity asked for.
        capacity: u64,
        /// What it would leave usable.
        usable: u64,
        /// Non-weight bytes in the ledger.
        held: u64,
    },
    /// No capacity figure: neither the driver nor `--vram-budget` gave one.
    #[error("no VRAM capacity known for this adapter; pass --vram-budget")]
    UnknownCapacity,
    /// Can never fit: larger than everything the budget allows. Not retryable.
    #[error("{class} allocation of {} can never fit: usable VRAM is {}", Bytes(*needed), Bytes(*usable))]
    BudgetExceeded {
        /// Owner class asked for.
        class: OwnerClass,
        /// Bytes asked for.
        needed: u64,
        /// `capacity − reserve − headroom`.
        usable: u64,
    },
    /// Fits the budget, but only after evicting `deficit` bytes. Retry after freeing.
    #[error("{class} allocation of {} needs {} evicted first", Bytes(*needed), Bytes(*deficit))]
    NeedsEviction {
        /// Owner class asked for.
        class: OwnerClass,
        /// Bytes asked for.
        needed: u64,
        /// Bytes to free first.
        deficit: u64,
    },
    /// A ledger error (freeing an unknown id).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Converts a GiB float (a flag value) to bytes, ×1024³, rounding to the nearest byte.
///
/// ```
/// use dynvram_memory::budget::{gib, GIB};
/// assert_eq!(gib("--reserve-vram", 0.25).unwrap(), GIB / 4);
/// assert!(gib("--reserve-vram", -1.0).is_err());
/// assert!(gib("--reserve-vram", f64::NAN).is_err());
/// ```
pub fn gib(flag: &'static str, value: f64) -> Result<u64, BudgetError> {
    // 2^34 GiB = 2^64 B: anything at or above that cannot be a byte count.
    if !value.is_finite() || value < 0.0 || value >= (1u64 << 34) as f64 {
        return Err(BudgetError::InvalidGib { flag, value });
    }
    let bytes = (value * GIB as f64).round();
    if bytes >= u64::MAX as f64 {
        return Err(BudgetError::InvalidGib { flag, value });
    }
    Ok(bytes as u64)
}

/// The user's settings: the three flags of docs/behaviour.md, Budget, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct BudgetConfig {
    /// `--vram-budget`: an explicit capacity overriding the driver's.
    pub vram_budget: Option<u64>,
    /// `--reserve-vram`: our own usage is capped at `capacity − reserve`.
    /// Also the `floor_free` of the measured term: the driver-reported free
    /// VRAM we keep untouched (so both methods agree when we are the only user).
    pub reserve: u64,
    /// `--vram-headroom`: added on top of both methods.
    pub headroom: u64,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            vram_budget: None,
            reserve: DEFAULT_RESERVE,
            headroom: 0,
        }
    }
}

impl BudgetConfig {
    /// A capacity of exactly `bytes`, all of it usable: no reserve, no
    /// headroom (tests, and applications handed a fixed share of a GPU).
    pub fn exactly(bytes: u64) -> Self {
        Self {
            vram_budget: Some(bytes),
            reserve: 0,
            headroom: 0,
        }
    }

    /// Builds a config from the GiB flag values, validating each. An
    /// explicit `vram_budget` is the budget: the default reserve applies to
    /// driver-derived capacities only (a reserve given explicitly applies
    /// to either; the headroom always does).
    pub fn from_gib(
        vram_budget: Option<f64>,
        reserve: Option<f64>,
        headroom: Option<f64>,
    ) -> Result<Self, BudgetError> {
        let d = Self::default();
        Ok(Self {
            vram_budget: vram_budget.map(|v| gib("--vram-budget", v)).transpose()?,
            reserve: match (reserve, vram_budget) {
                (Some(v), _) => gib("--reserve-vram", v)?,
                (None, Some(_)) => 0,
                (None, None) => d.reserve,
            },
            headroom: headroom.map_or(Ok(d.headroom), |v| gib("--vram-headroom", v))?,
        })
    }
}

/// Where the capacity figure came from (reported by `dynvram probe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CapacitySource {
    /// Vulkan `VK_EXT_memory_budget` heap budget of the DEVICE_LOCAL heaps.
    VulkanMemoryBudget,
    /// DX12 `IDXGIAdapter3::QueryVideoMemoryInfo`, local segment.
    Dx12VideoMemoryInfo,
    /// Metal `recommendedMaxWorkingSetSize`.
    MetalWorkingSet,
    /// Size of the largest device-local heap (no budget query available).
    LargestDeviceLocalHeap,
    /// `--vram-budget`.
    Explicit,
    /// Nothing known.
    Unknown,
}

impl fmt::Display for CapacitySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CapacitySource::VulkanMemoryBudget => "Vulkan VK_EXT_memory_budget",
            CapacitySource::Dx12VideoMemoryInfo => "DX12 QueryVideoMemoryInfo",
            CapacitySource::MetalWorkingSet => "Metal recommendedMaxWorkingSetSize",
            CapacitySource::LargestDeviceLocalHeap => "largest device-local heap",
            CapacitySource::Explicit => "--vram-budget",
            CapacitySource::Unknown => "unknown",
        })
    }
}

/// Picks the capacity: `--vram-budget` wins, else the driver's figure.
pub fn resolve_capacity(
    config: &BudgetConfig,
    driver: Option<(u64, CapacitySource)>,
) -> Result<(u64, CapacitySource), BudgetError> {
    match (config.vram_budget, driver) {
        (Some(explicit), _) => Ok((explicit, CapacitySource::Explicit)),
        (None, Some((c, s))) if s != CapacitySource::Unknown => Ok((c, s)),
        _ => Err(BudgetError::UnknownCapacity),
    }
}

/// One driver figure: what the driver allows this process and what is in use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DriverReading {
    /// Budget (or capacity) the driver grants, bytes.
    pub budget: u64,
    /// Bytes in use as the driver sees them.
    pub usage: u64,
}

impl DriverReading {
    /// Free VRAM as the driver sees it (`driver_free` of docs/behaviour.md, Budget).
    pub fn free(&self) -> u64 {
        self.budget.saturating_sub(self.usage)
    }
}

/// Something that can ask the driver for its memory figures (the wgpu-hal
/// query lives in `runtime`). `None` means "no figure this time".
pub trait DriverMemory {
    /// Reads the driver's current budget and usage.
    fn poll(&mut self) -> Option<DriverReading>;
}

/// Everything the deficit rule looks at, as plain numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeficitInputs {
    /// Bytes in our ledger now.
    pub tracked: u64,
    /// Bytes about to be allocated.
    pub size: u64,
    /// `--reserve-vram`.
    pub reserve: u64,
    /// Capacity.
    pub capacity: u64,
    /// `--vram-headroom`.
    pub headroom: u64,
    /// The last driver poll, if any: `(floor_free, driver_free, tracked_at_last_poll)`.
    pub driver: Option<(u64, u64, u64)>,
}

/// Both terms of the rule and the result, for reports and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deficit {
    /// `tracked + size + reserve − capacity`.
    pub simple: i128,
    /// `floor_free − driver_free + (tracked − tracked_at_last_poll) + size`, when polled.
    pub measured: Option<i128>,
    /// `max(simple, measured) + headroom`; free at least this much when positive.
    pub deficit: i128,
}

/// The deficit rule (docs/behaviour.md, Budget), exactly, in signed arithmetic.
pub fn compute_deficit(i: DeficitInputs) -> Deficit {
    let (tracked, size) = (i128::from(i.tracked), i128::from(i.size));
    let simple = tracked + size + i128::from(i.reserve) - i128::from(i.capacity);
    let measured = i.driver.map(|(floor_free, driver_free, at_poll)| {
        let driver_deficit = i128::from(floor_free) - i128::from(driver_free);
        driver_deficit + (tracked - i128::from(at_poll)) + size
    });
    let deficit = measured.map_or(simple, |m| m.max(simple)) + i128::from(i.headroom);
    Deficit {
        simple,
        measured,
        deficit,
    }
}

/// Last driver poll kept by [`Budget`].
#[derive(Debug, Clone, Copy)]
struct Poll {
    at: Instant,
    reading: Option<DriverReading>,
    tracked_at_poll: u64,
}

/// Capacity, settings, the ledger and the throttled driver poll.
pub struct Budget {
    capacity: u64,
    source: CapacitySource,
    config: BudgetConfig,
    ledger: Ledger,
    driver: Option<Box<dyn DriverMemory + Send>>,
    last_poll: Option<Poll>,
    poll_interval: Duration,
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Budget")
            .field("capacity", &self.capacity)
            .field("source", &self.source)
            .field("config", &self.config)
            .field("ledger", &self.ledger)
            .field("has_driver", &self.driver.is_some())
            .field("last_reading", &self.last_poll.and_then(|p| p.reading))
            .finish()
    }
}

impl Budget {
    /// A budget of `capacity` bytes from `source`. Fails if nothing is usable.
    pub fn new(
        capacity: u64,
        source: CapacitySource,
        config: BudgetConfig,
    ) -> Result<Self, BudgetError> {
        let b = Self {
            capacity,
            source,
            config,
            ledger: Ledger::new(),
            driver: None,
            last_poll: None,
            poll_interval: DRIVER_POLL_INTERVAL,
        };
        b.check_usable()?;
        Ok(b)
    }

    /// Adds a driver to poll for the measured term.
    pub fn with_driver(mut self, driver: Box<dyn DriverMemory + Send>) -> Self {
        self.driver = Some(driver);
        self.last_poll = None;
        self
    }

    fn check_usable(&self) -> Result<(), BudgetError> {
        if self.usable() == 0 {
            return Err(BudgetError::NoUsableVram {
                capacity: self.capacity,
                source_name: self.source,
                reserve: self.config.reserve,
                headroom: self.config.headroom,
            });
        }
        Ok(())
    }

    /// Changes the capacity (driver budget change or a new `--vram-budget`).
    /// Callers then evict weights down to [`Budget::weights_limit`]. Refused
    /// (capacity unchanged) when even evicting every weight would not fit.
    pub fn set_capacity(
        &mut self,
        capacity: u64,
        source: CapacitySource,
    ) -> Result<(), BudgetError> {
        let old = (self.capacity, self.source);
        self.capacity = capacity;
        self.source = source;
        let held = self.ledger.total() - self.ledger.loaded_vram();
        let check = self.check_usable().and_then(|()| {
            if self.usable() < held {
                return Err(BudgetError::CapacityTooSmall {
                    capacity,
                    usable: self.usable(),
                    held,
                });
            }
            Ok(())
        });
        if let Err(e) = check {
            (self.capacity, self.source) = old;
            return Err(e);
        }
        tracing::info!(capacity, %source, "vram capacity changed");
        Ok(())
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Where the capacity came from.
    pub fn source(&self) -> CapacitySource {
        self.source
    }

    /// The settings.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// The ledger (bytes per class, peak, `loaded_vram`).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Starts the ledger's peak again from the bytes held now.
    pub fn reset_peak(&mut self) {
        self.ledger.reset_peak();
    }

    /// `capacity − reserve − headroom` (0 if negative): our usage never exceeds it.
    pub fn usable(&self) -> u64 {
        self.capacity
            .saturating_sub(self.config.reserve)
            .saturating_sub(self.config.headroom)
    }

    /// The last driver reading, if one was taken.
    pub fn last_reading(&self) -> Option<DriverReading> {
        self.last_poll.and_then(|p| p.reading)
    }

    /// Polls the driver if the last poll is at least 2 s old (or there was none).
    pub fn maybe_poll(&mut self, now: Instant) {
        let due = self
            .last_poll
            .is_none_or(|p| now.saturating_duration_since(p.at) >= self.poll_interval);
        let Some(driver) = self.driver.as_mut().filter(|_| due) else {
            return;
        };
        let reading = driver.poll();
        tracing::trace!(?reading, "driver memory poll");
        // A failed poll keeps the previous figure but still waits a full interval.
        let prev = self.last_poll;
        self.last_poll = Some(match (reading, prev) {
            (Some(r), _) => Poll {
                at: now,
                reading: Some(r),
                tracked_at_poll: self.ledger.total(),
            },
            (None, Some(p)) => Poll { at: now, ..p },
            (None, None) => Poll {
                at: now,
                reading: None,
                tracked_at_poll: self.ledger.total(),
            },
        });
    }

    /// The deficit for an allocation of `size` bytes, both terms shown.
    /// Polls the driver first if due.
    pub fn deficit_detail(&mut self, size: u64, now: Instant) -> Deficit {
        self.maybe_poll(now);
        let driver = self.last_poll.and_then(|p| {
            p.reading
                .map(|r| (self.config.reserve, r.free(), p.tracked_at_poll))
        });
        compute_deficit(DeficitInputs {
            tracked: self.ledger.total(),
            size,
            reserve: self.config.reserve,
            capacity: self.capacity,
            headroom: self.config.headroom,
            driver,
        })
    }

    /// `max(simple, measured) + headroom` for `size` bytes (docs/behaviour.md, Budget). Positive:
    /// free at least this many bytes first.
    pub fn deficit(&mut self, size: u64, now: Instant) -> i128 {
        self.deficit_detail(size, now).deficit
    }

    /// The most bytes of `weights` that may be resident now: current weights
    /// minus the deficit of a zero-byte allocation (clamped at 0). Give this to
    /// [`crate::Residency::set_limit`].
    pub fn weights_limit(&mut self, now: Instant) -> u64 {
        let d = self.deficit(0, now);
        let limit = i128::from(self.ledger.loaded_vram()) - d;
        u64::try_from(limit.max(0)).unwrap_or(u64::MAX)
    }

    /// Records an allocation if it fits now. `BudgetExceeded` when it can never
    /// fit, `NeedsEviction` when something must be freed first.
    pub fn allocate(
        &mut self,
        class: OwnerClass,
        size: u64,
        now: Instant,
    ) -> Result<AllocId, BudgetError> {
        let usable = self.usable();
        if size > usable {
            return Err(BudgetError::BudgetExceeded {
                class,
                needed: size,
                usable,
            });
        }
        let deficit = self.deficit(size, now);
        if deficit > 0 {
            return Err(BudgetError::NeedsEviction {
                class,
                needed: size,
                deficit: u64::try_from(deficit).unwrap_or(u64::MAX),
            });
        }
        Ok(self.ledger.allocate(class, size))
    }

    /// Forgets an allocation.
    pub fn free(&mut self, id: AllocId) -> Result<(OwnerClass, u64), BudgetError> {
        Ok(self.ledger.free(id)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = MIB;

    #[test]
    fn simple_term_by_hand() {
        // 8 GiB card, 7 GiB tracked, 512 MiB asked, 256 MiB reserve:
        // 7168 + 512 + 256 − 8192 = −256 MiB, no headroom → fits with 256 MiB spare.
        let d = compute_deficit(DeficitInputs {
            tracked: 7168 * M,
            size: 512 * M,
            reserve: 256 * M,
            capacity: 8192 * M,
            headroom: 0,
            driver: None,
        });
        assert_eq!(d.simple, -256 * M as i128);
        assert_eq!(d.measured, None);
        assert_eq!(d.deficit, -256 * M as i128);
        // With 1 GiB headroom it no longer fits: −256 + 1024 = 768 MiB to free.
        let d = compute_deficit(DeficitInputs {
            headroom: 1024 * M,
            ..DeficitInputs {
                tracked: 7168 * M,
                size: 512 * M,
                reserve: 256 * M,
                capacity: 8192 * M,
                headroom: 0,
                driver: None,
            }
        });
        assert_eq!(d.deficit, 768 * M as i128);
    }

    #[test]
    fn measured_term_by_hand() {
        // Another program took VRAM: the driver says 300 MiB free, floor 256 MiB.
        // driver_deficit = 256 − 300 = −44; we allocated 100 MiB since the poll
        // (tracked 2100, at poll 2000); size 64 → measured = −44 + 100 + 64 = 120 MiB.
        // simple = 2100 + 64 + 256 − 8192 = −5772. deficit = max + headroom 10 = 130 MiB.
        let d = compute_deficit(DeficitInputs {
            tracked: 2100 * M,
            size: 64 * M,
            reserve: 256 * M,
            capacity: 8192 * M,
            headroom: 10 * M,
            driver: Some((256 * M, 300 * M, 2000 * M)),
        });
        assert_eq!(d.simple, -5772 * M as i128);
        assert_eq!(d.measured, Some(120 * M as i128));
        assert_eq!(d.deficit, 130 * M as i128);
        // Tracked below the poll figure (we freed since): growth is negative.
        let d = compute_deficit(DeficitInputs {
            tracked: 1900 * M,
            size: 0,
            reserve: 256 * M,
            capacity: 8192 * M,
            headroom: 0,
            driver: Some((256 * M, 200 * M, 2000 * M)),
        });
        assert_eq!(d.measured, Some((56 - 100) * M as i128));
    }

    #[test]
    fn gib_flags() {
        assert_eq!(gib("x", 0.0), Ok(0));
        assert_eq!(gib("x", 1.5), Ok(GIB + GIB / 2));
        for bad in [-0.1, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1e30] {
            assert!(
                matches!(gib("x", bad), Err(BudgetError::InvalidGib { .. })),
                "{bad}"
            );
        }
        let c = BudgetConfig::from_gib(Some(4.0), None, Some(0.5)).unwrap();
        assert_eq!(c.vram_budget, Some(4 * GIB));
        assert_eq!(c.reserve, 0, "an explicit budget is the budget");
        assert_eq!(c.headroom, GIB / 2);
        let c = BudgetConfig::from_gib(None, None, None).unwrap();
        assert_eq!(
            c.reserve, DEFAULT_RESERVE,
            "the driver's figure keeps the reserve"
        );
        let c = BudgetConfig::from_gib(Some(4.0), Some(1.0), None).unwrap();
        assert_eq!(c.reserve, GIB, "a reserve given explicitly applies");
        assert!(BudgetConfig::from_gib(None, Some(-1.0), None).is_err());
    }

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(Bytes(100).to_string(), "100 B");
        assert_eq!(Bytes(1536).to_string(), "1.50 KiB");
        assert_eq!(Bytes(GIB / 4).to_string(), "256.00 MiB");
        assert_eq!(Bytes(8 * GIB).to_string(), "8.00 GiB");
        let e = BudgetError::NoUsableVram {
            capacity: GIB / 8,
            source_name: CapacitySource::Explicit,
            reserve: GIB / 4,
            headroom: 0,
        };
        assert_eq!(
            e.to_string(),
            "capacity 128.00 MiB (--vram-budget) minus reserve 256.00 MiB and headroom 0 B leaves no VRAM to use"
        );
    }

    #[test]
    fn capacity_resolution_and_display() {
        let c = BudgetConfig::default();
        assert_eq!(
            resolve_capacity(&c, Some((10, CapacitySource::VulkanMemoryBudget))),
            Ok((10, CapacitySource::VulkanMemoryBudget))
        );
        let e = BudgetConfig {
            vram_budget: Some(7),
            ..c
        };
        assert_eq!(
            resolve_capacity(&e, Some((10, CapacitySource::VulkanMemoryBudget))),
            Ok((7, CapacitySource::Explicit))
        );
        assert_eq!(
            resolve_capacity(&c, None),
            Err(BudgetError::UnknownCapacity)
        );
        assert_eq!(CapacitySource::Explicit.to_string(), "--vram-budget");
    }

    /// A driver whose figures the test sets, counting polls.
    struct FakeDriver {
        reading: std::sync::Arc<std::sync::Mutex<(Option<DriverReading>, u32)>>,
    }

    impl DriverMemory for FakeDriver {
        fn poll(&mut self) -> Option<DriverReading> {
            let mut g = self.reading.lock().ok()?;
            g.1 += 1;
            g.0
        }
    }

    #[test]
    fn poll_is_throttled_and_growth_added_by_hand() {
        let shared = std::sync::Arc::new(std::sync::Mutex::new((
            Some(DriverReading {
                budget: 1000 * M,
                usage: 0,
            }),
            0u32,
        )));
        let cfg = BudgetConfig {
            vram_budget: None,
            reserve: 100 * M,
            headroom: 0,
        };
        let mut b = Budget::new(1000 * M, CapacitySource::VulkanMemoryBudget, cfg)
            .unwrap()
            .with_driver(Box::new(FakeDriver {
                reading: shared.clone(),
            }));
        let t0 = Instant::now();
        assert_eq!(b.deficit(0, t0), -900 * M as i128);
        // Another program takes 500 MiB; not seen until the next poll.
        shared.lock().unwrap().0 = Some(DriverReading {
            budget: 1000 * M,
            usage: 500 * M,
        });
        b.allocate(
            OwnerClass::Scratch,
            200 * M,
            t0 + Duration::from_millis(500),
        )
        .unwrap();
        // Before 2 s: measured = 100 − 1000 + 200 + 0 = −700 = simple. No new poll.
        assert_eq!(
            b.deficit(0, t0 + Duration::from_millis(1999)),
            -700 * M as i128
        );
        assert_eq!(shared.lock().unwrap().1, 1);
        // At 2 s: driver free 500, tracked growth 200 since the first poll is now
        // folded in (tracked_at_poll = 200): 100 − 500 + 0 + 0 = −400.
        assert_eq!(b.deficit(0, t0 + Duration::from_secs(2)), -400 * M as i128);
        assert_eq!(shared.lock().unwrap().1, 2);
        assert_eq!(b.weights_limit(t0 + Duration::from_secs(2)), 400 * M);
        // 450 MiB needs 50 MiB evicted; 2 GiB can never fit.
        assert_eq!(
            b.allocate(OwnerClass::Weights, 450 * M, t0 + Duration::from_secs(3)),
            Err(BudgetError::NeedsEviction {
                class: OwnerClass::Weights,
                needed: 450 * M,
                deficit: 50 * M
            })
        );
        assert!(matches!(
            b.allocate(OwnerClass::Weights, 2048 * M, t0 + Duration::from_secs(3)),
            Err(BudgetError::BudgetExceeded { .. })
        ));
    }

    #[test]
    fn nothing_usable_is_an_error() {
        let cfg = BudgetConfig {
            vram_budget: None,
            reserve: GIB,
            headroom: GIB,
        };
        assert!(matches!(
            Budget::new(2 * GIB, CapacitySource::Explicit, cfg),
            Err(BudgetError::NoUsableVram { .. })
        ));
        let mut b = Budget::new(3 * GIB, CapacitySource::Explicit, cfg).unwrap();
        assert_eq!(b.usable(), GIB);
        assert!(b.set_capacity(GIB, CapacitySource::Explicit).is_err());
        assert_eq!(
            b.capacity(),
            3 * GIB,
            "a refused change keeps the old capacity"
        );
    }
}
