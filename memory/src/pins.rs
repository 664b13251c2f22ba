//! Host RAM copies of streamed weights ("pins", docs/behaviour.md, Pins): how many, which tier,
//! which to drop when RAM runs short, and which to spread out (max scatter).
//!
//! Plain data in (a [`RamReading`], a weight key and size), a [`PinDecision`]
//! out. The runtime performs the actions (map a host-visible buffer, read the
//! file into it, free it) and passes a fresh reading next time.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::bit_reverse::bit_reverse16;
use crate::budget::GIB;
use crate::residency::ModelId;

/// Fraction of RAM that may be registered (host-visible mapped) *(ComfyUI)*.
#[cfg(windows)]
pub const MAX_PINNED_FRACTION: f64 = 0.40;
/// Fraction of RAM that may be registered (host-visible mapped) *(ComfyUI)*.
#[cfg(not(windows))]
pub const MAX_PINNED_FRACTION: f64 = 0.90;
/// Free RAM never goes below this *(ComfyUI: 2 GB minimum)*.
pub const MIN_FREE_RAM: u64 = 2 * GIB;
/// Registration is released this much beyond what is needed, to avoid churn.
pub const REGISTRATION_HYSTERESIS: u64 = 2 * GIB;

/// One weight of one model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct WeightKey {
    /// Owner.
    pub model: ModelId,
    /// Tensor index (load order).
    pub tensor: u32,
}

/// Which kind of RAM copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum PinTier {
    /// In a persistent host-visible `MAP_WRITE | COPY_SRC` buffer: DMA-ready.
    Registered,
    /// Plain RAM: copied into the staging ring each pass.
    Unregistered,
}

/// Something the runtime must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PinAction {
    /// Keep a RAM copy of `weight` in `tier` (read it from the file into it).
    Pin {
        /// Weight.
        weight: WeightKey,
        /// Bytes.
        size: u64,
        /// Tier.
        tier: PinTier,
    },
    /// Drop the RAM copy of `weight`.
    Unpin {
        /// Weight.
        weight: WeightKey,
        /// Bytes freed.
        size: u64,
    },
    /// Move an unregistered copy into registered memory.
    Register {
        /// Weight.
        weight: WeightKey,
    },
    /// Move a registered copy to plain RAM (or drop the registration).
    Unregister {
        /// Weight.
        weight: WeightKey,
    },
    /// No RAM copy: stream `weight` from disk this pass.
    Stream {
        /// Weight.
        weight: WeightKey,
    },
}

/// Where the weight's bytes come from for this upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum CopySource {
    /// A registered pin: `copy_buffer_to_buffer`, no CPU copy.
    RegisteredPin,
    /// A plain-RAM pin: through the staging ring.
    RamPin,
    /// The file (a new pin, if any, is filled on the way).
    Disk,
}

/// The answer to [`PinPolicy::need`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinDecision {
    /// Actions in order (frees first).
    pub actions: Vec<PinAction>,
    /// Where the upload reads from.
    pub source: CopySource,
}

/// RAM figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RamReading {
    /// Total RAM.
    pub total: u64,
    /// RAM available without swapping (`MemAvailable`).
    pub available: u64,
}

/// Pin errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinError {
    /// Reading the RAM figures failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// File read.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// A field missing or unparsable in the RAM figures.
    #[error("{path}: field {field} missing or not a number")]
    Parse {
        /// File read.
        path: PathBuf,
        /// Field name.
        field: &'static str,
    },
}

/// Where RAM figures come from (injectable so tests can simulate pressure).
pub trait RamSource {
    /// Reads total and available RAM.
    fn read(&mut self) -> Result<RamReading, PinError>;
}

/// Linux `/proc/meminfo` (`MemTotal`, `MemAvailable`).
#[derive(Debug, Clone)]
pub struct ProcMeminfo {
    /// Path, `/proc/meminfo` by default.
    pub path: PathBuf,
}

impl Default for ProcMeminfo {
    fn default() -> Self {
        Self {
            path: PathBuf::from("/proc/meminfo"),
        }
    }
}

/// Parses `/proc/meminfo` text (values in kB).
pub fn parse_meminfo(text: &str, path: &std::path::Path) -> Result<RamReading, PinError> {
    let field = |name: &'static str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb.saturating_mul(1024))
            .ok_or(PinError::Parse {
                path: path.to_owned(),
                field: name,
            })
    };
    Ok(RamReading {
        total: field("MemTotal")?,
        available: field("MemAvailable")?,
    })
}

impl RamSource for ProcMeminfo {
    fn read(&mut self) -> Result<RamReading, PinError> {
        let text = std::fs::read_to_string(&self.path).map_err(|source| PinError::Io {
            path: self.path.clone(),
            source,
        })?;
        parse_meminfo(&text, &self.path)
    }
}

/// A fixed reading, for tests and for platforms without a reader.
#[derive(Debug, Clone, Copy)]
pub struct FakeRam(pub RamReading);

impl RamSource for FakeRam {
    fn read(&mut self) -> Result<RamReading, PinError> {
        Ok(self.0)
    }
}

/// Pin settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PinConfig {
    /// Registration ceiling `MAX_PINNED` in bytes.
    pub max_pinned: u64,
    /// `cache_headroom`: clamp(10 % RAM, 2 GiB, 10 GiB) by default.
    pub cache_headroom: u64,
    /// Free RAM never goes below this (2 GiB).
    pub min_free: u64,
    /// Registration release hysteresis (2 GiB).
    pub hysteresis: u64,
    /// `--fast-disk`: no RAM copy beyond the registrable amount.
    pub fast_disk: bool,
}

impl PinConfig {
    /// Defaults for a machine with `total_ram` bytes.
    pub fn for_ram(total_ram: u64, fast_disk: bool) -> Self {
        Self {
            max_pinned: (total_ram as f64 * MAX_PINNED_FRACTION) as u64,
            cache_headroom: (total_ram / 10).clamp(2 * GIB, 10 * GIB),
            min_free: MIN_FREE_RAM,
            hysteresis: REGISTRATION_HYSTERESIS,
            fast_disk,
        }
    }

    /// RAM kept free beyond a new pin: `max(cache_headroom / 2, min_free)`.
    pub fn floor(&self) -> u64 {
        (self.cache_headroom / 2).max(self.min_free)
    }
}

#[derive(Debug, Clone, Copy)]
struct Pin {
    size: u64,
    tier: PinTier,
    pinned_seq: u64,
    last_use: u64,
}

/// The pin policy's state: every RAM copy, its tier and priority.
#[derive(Debug, Clone)]
pub struct PinPolicy {
    cfg: PinConfig,
    pins: HashMap<WeightKey, Pin>,
    priorities: HashMap<WeightKey, u16>,
    counter: u64,
    tick: u64,
    seq: u64,
    active: Option<ModelId>,
    pinned: u64,
    registered: u64,
}

impl PinPolicy {
    /// A policy with no pins.
    pub fn new(cfg: PinConfig) -> Self {
        Self {
            cfg,
            pins: HashMap::new(),
            priorities: HashMap::new(),
            counter: 0,
            tick: 0,
            seq: 0,
            active: None,
            pinned: 0,
            registered: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &PinConfig {
        &self.cfg
    }

    /// Marks the model being run (its pins are freed last).
    pub fn set_active(&mut self, model: Option<ModelId>) {
        self.active = model;
    }

    /// Bytes of all RAM copies.
    pub fn pinned_bytes(&self) -> u64 {
        self.pinned
    }

    /// Bytes of registered copies (never above `max_pinned`).
    pub fn registered_bytes(&self) -> u64 {
        self.registered
    }

    /// Bytes of `model`'s RAM copies (its `loaded_ram`).
    pub fn model_bytes(&self, model: ModelId) -> u64 {
        self.pins
            .iter()
            .filter(|(k, _)| k.model == model)
            .map(|(_, p)| p.size)
            .sum()
    }

    /// Tier of `weight`'s copy, if pinned.
    pub fn tier(&self, weight: WeightKey) -> Option<PinTier> {
        self.pins.get(&weight).map(|p| p.tier)
    }

    /// Pin priority of `weight`, assigned when it was first considered.
    pub fn priority(&self, weight: WeightKey) -> Option<u16> {
        self.priorities.get(&weight).copied()
    }

    /// Decides, at a submit boundary, how `weight` (about to be uploaded, not
    /// VRAM-resident) gets there and which RAM copies change. `ram` is a
    /// reading taken before any of the returned actions.
    pub fn need(&mut self, weight: WeightKey, size: u64, ram: RamReading) -> PinDecision {
        self.tick += 1;
        let tick = self.tick;
        let mut actions = Vec::new();
        if let Some(pin) = self.pins.get_mut(&weight) {
            pin.last_use = tick;
            let tier = pin.tier;
            let source = match tier {
                PinTier::Registered => CopySource::RegisteredPin,
                PinTier::Unregistered if self.try_register(weight, size, &mut actions) => {
                    CopySource::RegisteredPin
                }
                PinTier::Unregistered => CopySource::RamPin,
            };
            return PinDecision { actions, source };
        }
        let counter = &mut self.counter;
        let priority = *self.priorities.entry(weight).or_insert_with(|| {
            let p = bit_reverse16(*counter);
            *counter += 1;
            p
        });
        // RAM floor: free inactive models' pins, least recently used first.
        let mut avail = i128::from(ram.available);
        let floor = i128::from(self.cfg.floor());
        let shortfall = |avail: i128| i128::from(size) + floor - avail;
        if shortfall(avail) > 0 {
            let freed = self.free_inactive(shortfall(avail), &mut actions);
            avail += i128::from(freed);
        }
        let registrable = size <= self.cfg.max_pinned.saturating_sub(self.registered);
        let room = shortfall(avail) <= 0 && (!self.cfg.fast_disk || registrable);
        if !room {
            // Pin budget exhausted: take the pin of a same-size, lower-priority weight.
            if let Some(tier) = self.steal(weight, size, priority, &mut actions) {
                self.insert(weight, size, tier, tick);
                actions.push(PinAction::Pin { weight, size, tier });
                return PinDecision {
                    actions,
                    source: CopySource::Disk,
                };
            }
            actions.push(PinAction::Stream { weight });
            return PinDecision {
                actions,
                source: CopySource::Disk,
            };
        }
        let tier = if registrable {
            PinTier::Registered
        } else {
            // Not fast-disk here: the active model may exceed the ceiling in plain RAM.
            PinTier::Unregistered
        };
        self.insert(weight, size, tier, tick);
        actions.push(PinAction::Pin { weight, size, tier });
        if tier == PinTier::Unregistered {
            // Registration follows the weights in use.
            self.try_register(weight, size, &mut actions);
        }
        PinDecision {
            actions,
            source: CopySource::Disk,
        }
    }

    /// Keeps at least `min_free` RAM free under outside pressure: frees
    /// inactive models' pins (LRU first), then the active model's lowest-priority ones.
    pub fn relieve(&mut self, ram: RamReading) -> Vec<PinAction> {
        let mut actions = Vec::new();
        let mut short = i128::from(self.cfg.min_free) - i128::from(ram.available);
        if short <= 0 {
            return actions;
        }
        let _span = tracing::debug_span!("relieve_ram", short).entered();
        short -= i128::from(self.free_inactive(short, &mut actions));
        let mut active: Vec<(WeightKey, u16)> = self
            .pins
            .keys()
            .map(|&k| (k, self.priorities.get(&k).copied().unwrap_or(0)))
            .collect();
        active.sort_by_key(|&(k, p)| (p, k));
        for (k, _) in active {
            if short <= 0 {
                break;
            }
            short -= i128::from(self.remove(k, &mut actions));
        }
        actions
    }

    /// Drops every pin of `model`.
    pub fn unload(&mut self, model: ModelId) -> Vec<PinAction> {
        let mut keys: Vec<WeightKey> = self
            .pins
            .keys()
            .copied()
            .filter(|k| k.model == model)
            .collect();
        keys.sort();
        let mut actions = Vec::new();
        for k in keys {
            self.remove(k, &mut actions);
        }
        self.priorities.retain(|k, _| k.model != model);
        if self.active == Some(model) {
            self.active = None;
        }
        actions
    }

    fn insert(&mut self, weight: WeightKey, size: u64, tier: PinTier, tick: u64) {
        self.seq += 1;
        self.pins.insert(
            weight,
            Pin {
                size,
                tier,
                pinned_seq: self.seq,
                last_use: tick,
            },
        );
        self.pinned += size;
        if tier == PinTier::Registered {
            self.registered += size;
        }
    }

    /// Removes a pin; returns its size.
    fn remove(&mut self, weight: WeightKey, actions: &mut Vec<PinAction>) -> u64 {
        let Some(pin) = self.pins.remove(&weight) else {
            return 0;
        };
        self.pinned -= pin.size;
        if pin.tier == PinTier::Registered {
            self.registered -= pin.size;
        }
        actions.push(PinAction::Unpin {
            weight,
            size: pin.size,
        });
        pin.size
    }

    /// Frees pins of inactive models, least recently used first, until `bytes` are freed.
    fn free_inactive(&mut self, bytes: i128, actions: &mut Vec<PinAction>) -> u64 {
        let mut lru: Vec<(u64, WeightKey)> = self
            .pins
            .iter()
            .filter(|(k, _)| Some(k.model) != self.active)
            .map(|(k, p)| (p.last_use, *k))
            .collect();
        lru.sort();
        let mut freed = 0u64;
        for (_, k) in lru {
            if i128::from(freed) >= bytes {
                break;
            }
            freed += self.remove(k, actions);
        }
        freed
    }

    /// Same-size stealing: the lowest-priority pin of exactly `size` bytes
    /// below `priority` gives its RAM to `weight`. Returns the tier taken over.
    fn steal(
        &mut self,
        weight: WeightKey,
        size: u64,
        priority: u16,
        actions: &mut Vec<PinAction>,
    ) -> Option<PinTier> {
        let victim = self
            .pins
            .iter()
            .filter(|(k, p)| p.size == size && **k != weight)
            .map(|(k, p)| {
                (
                    self.priorities.get(k).copied().unwrap_or(0),
                    p.last_use,
                    *k,
                    p.tier,
                )
            })
            .filter(|&(p, ..)| p < priority)
            .min()?;
        self.remove(victim.2, actions);
        Some(victim.3)
    }

    /// Registration movement: registers `weight`'s plain copy, releasing
    /// registration from inactive models (LRU first), then from the active
    /// model's newest pins, 2 GiB beyond what is needed. Not in fast-disk mode
    /// (there every copy is registered from the start).
    fn try_register(&mut self, weight: WeightKey, size: u64, actions: &mut Vec<PinAction>) -> bool {
        if self.cfg.fast_disk || size > self.cfg.max_pinned {
            return false;
        }
        let over = (self.registered + size).saturating_sub(self.cfg.max_pinned);
        if over > 0 {
            let goal = over.saturating_add(self.cfg.hysteresis);
            let mut cands: Vec<(bool, i128, WeightKey)> = self
                .pins
                .iter()
                .filter(|(k, p)| p.tier == PinTier::Registered && **k != weight)
                .map(|(k, p)| {
                    let is_active = Some(k.model) == self.active;
                    // inactive: oldest use first; active: newest pin first.
                    let key = if is_active {
                        -i128::from(p.pinned_seq)
                    } else {
                        i128::from(p.last_use)
                    };
                    (is_active, key, *k)
                })
                .collect();
            cands.sort();
            let mut released = 0u64;
            for (_, _, k) in cands {
                if released >= goal {
                    break;
                }
                if let Some(p) = self.pins.get_mut(&k) {
                    p.tier = PinTier::Unregistered;
                    self.registered -= p.size;
                    released += p.size;
                    actions.push(PinAction::Unregister { weight: k });
                }
            }
        }
        let Some(p) = self.pins.get_mut(&weight) else {
            return false;
        };
        if self.registered + size > self.cfg.max_pinned {
            return false;
        }
        p.tier = PinTier::Registered;
        self.registered += size;
        actions.push(PinAction::Register { weight });
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_parses_and_reports_missing_fields() {
        let p = std::path::Path::new("/proc/meminfo");
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   12288000 kB\n";
        assert_eq!(
            parse_meminfo(text, p).unwrap(),
            RamReading {
                total: 24576000 * 1024,
                available: 12288000 * 1024
            }
        );
        assert!(matches!(
            parse_meminfo("MemTotal: 5 kB\n", p),
            Err(PinError::Parse {
                field: "MemAvailable",
                ..
            })
        ));
        #[cfg(target_os = "linux")]
        {
            let r = ProcMeminfo::default().read().unwrap();
            assert!(r.total > 0 && r.available <= r.total);
        }
    }

    #[test]
    fn defaults_follow_ram_size() {
        let c = PinConfig::for_ram(64 * GIB, false);
        assert_eq!(c.cache_headroom, 64 * GIB / 10);
        assert_eq!(PinConfig::for_ram(8 * GIB, false).cache_headroom, 2 * GIB);
        assert_eq!(
            PinConfig::for_ram(512 * GIB, false).cache_headroom,
            10 * GIB
        );
        assert_eq!(PinConfig::for_ram(8 * GIB, false).floor(), 2 * GIB);
        #[cfg(not(windows))]
        assert_eq!(c.max_pinned, (64.0 * 0.9 * GIB as f64) as u64);
    }
}
