//! How a model's weights are laid out over pages (docs/behaviour.md, Residency).
//!
//! Tiny tensors first (all of them are needed by every block and cost little),
//! then the rest, each group in load order. A tensor no larger than a page
//! never straddles a page boundary, so a page can be one wgpu buffer; a larger
//! tensor starts a fresh run of pages and owns them alone, so it can be one
//! multi-page buffer. Page sizes are the bytes actually used (≤ `page_size`).

use crate::budget::MIB;

/// Default page size *(aimdo: 32 MiB)*.
pub const DEFAULT_PAGE_SIZE: u64 = 32 * MIB;
/// Default offset alignment inside a page: wgpu's
/// `min_storage_buffer_offset_alignment` is at most 256.
pub const DEFAULT_ALIGN: u64 = 256;
/// Default "tiny" threshold: tensors up to this size (norms, biases, scales)
/// go first. Our choice; aimdo groups small tensors the same way.
pub const DEFAULT_TINY: u64 = 64 * 1024;

/// Layout parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LayoutConfig {
    /// Bytes per page.
    pub page_size: u64,
    /// Alignment of each tensor's offset inside a page (a power of two).
    pub align: u64,
    /// Tensors of at most this many bytes are laid out first.
    pub tiny_threshold: u64,
}

impl Default for LayoutConfig {
    fn default() -> Self {
        Self {
            page_size: DEFAULT_PAGE_SIZE,
            align: DEFAULT_ALIGN,
            tiny_threshold: DEFAULT_TINY,
        }
    }
}

/// Most pages a layout has: page indices are `u32`, and the planner's work
/// grows with the page count. 2^20 pages of the default 32 MiB are 32 TiB,
/// far above any real model; a header declaring more (a corrupt or hostile
/// file) is refused before anything is allocated.
pub const MAX_PAGES: u64 = 1 << 20;

/// Layout errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// Page size zero, or alignment not a power of two or larger than a page.
    #[error(
        "invalid layout: page size {page_size} B, alignment {align} B (need page > 0, align a power of two <= page)"
    )]
    InvalidConfig {
        /// Page size given.
        page_size: u64,
        /// Alignment given.
        align: u64,
    },
    /// The sizes need more than [`MAX_PAGES`] pages.
    #[error(
        "{bytes} B of weights would need {pages} pages of {page_size} B; at most {MAX_PAGES} pages are supported (is a tensor size in the header wrong?)"
    )]
    TooManyPages {
        /// Sum of the sizes (saturating).
        bytes: u64,
        /// Pages they would need (at least; saturating).
        pages: u64,
        /// Page size.
        page_size: u64,
    },
}

impl LayoutConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), LayoutError> {
        if self.page_size == 0 || !self.align.is_power_of_two() || self.align > self.page_size {
            return Err(LayoutError::InvalidConfig {
                page_size: self.page_size,
                align: self.align,
            });
        }
        Ok(())
    }
}

/// Where one tensor lives in the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TensorSlot {
    /// Bytes.
    pub size: u64,
    /// First page it occupies.
    pub first_page: u32,
    /// Last page it occupies (equal to `first_page` unless larger than a page).
    pub last_page: u32,
    /// Byte offset inside `first_page`.
    pub offset: u64,
}

/// A model's pages and tensor slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// Slot per tensor, indexed by load order.
    pub tensors: Vec<TensorSlot>,
    /// Used bytes of each page.
    pub pages: Vec<u64>,
    /// `prefix[w]` = bytes of pages `0..w` (length `pages + 1`).
    pub prefix: Vec<u64>,
    /// `cut[w]`: a watermark of `w` pages splits no multi-page tensor (length `pages + 1`).
    pub cut: Vec<bool>,
    /// Tensor indices (load order) in layout order.
    pub order: Vec<usize>,
}

fn align_up(x: u64, a: u64) -> u64 {
    x.div_ceil(a).saturating_mul(a)
}

impl Layout {
    /// Lays out `sizes` (load order) over pages.
    pub fn new(sizes: &[u64], cfg: &LayoutConfig) -> Result<Self, LayoutError> {
        Self::ranked(sizes, &[], cfg)
    }

    /// Lays out `sizes` (load order) over pages, the tensors past the tiny
    /// ones in order of `ranks` (one per tensor; ties and an empty slice in
    /// load order): a watermark then keeps the lowest ranks resident. The
    /// runtime ranks blocks so that what a watermark keeps of each run of
    /// equal blocks is spread over it (`residency_ranks`), and the streamed
    /// blocks' copies overlap the resident ones' work.
    pub fn ranked(sizes: &[u64], ranks: &[u64], cfg: &LayoutConfig) -> Result<Self, LayoutError> {
        cfg.validate()?;
        // Every tensor takes at most ceil(size / page) pages, at least one
        // page's worth counts only once per page: check before allocating.
        let bytes = sizes.iter().fold(0u64, |a, &s| a.saturating_add(s));
        let big_pages = sizes
            .iter()
            .filter(|&&s| s > cfg.page_size)
            .fold(0u64, |a, &s| a.saturating_add(s.div_ceil(cfg.page_size)));
        if big_pages > MAX_PAGES || bytes / cfg.page_size > MAX_PAGES {
            return Err(LayoutError::TooManyPages {
                bytes,
                pages: big_pages.max(bytes / cfg.page_size),
                page_size: cfg.page_size,
            });
        }
        let mut order: Vec<usize> = (0..sizes.len())
            .filter(|&i| sizes[i] <= cfg.tiny_threshold)
            .collect();
        let tiny = order.len();
        order.extend((0..sizes.len()).filter(|&i| sizes[i] > cfg.tiny_threshold));
        if !ranks.is_empty() {
            // Stable: load order within a rank.
            order[tiny..].sort_by_key(|&i| ranks.get(i).copied().unwrap_or(u64::MAX));
        }
        let mut tensors = vec![
            TensorSlot {
                size: 0,
                first_page: 0,
                last_page: 0,
                offset: 0
            };
            sizes.len()
        ];
        let mut pages: Vec<u64> = Vec::new();
        let mut cut_inside: Vec<bool> = Vec::new(); // per page: false if it continues a multi-page tensor
        // `open` = the page small tensors may still be added to.
        let mut open: Option<usize> = None;
        for &i in &order {
            let size = sizes[i];
            if size <= cfg.page_size {
                let page = match open {
                    Some(p)
                        if align_up(pages[p], cfg.align).saturating_add(size) <= cfg.page_size =>
                    {
                        p
                    }
                    _ => {
                        pages.push(0);
                        cut_inside.push(true);
                        pages.len() - 1
                    }
                };
                let offset = align_up(pages[page], cfg.align);
                pages[page] = offset + size;
                open = Some(page);
                let p = page as u32;
                tensors[i] = TensorSlot {
                    size,
                    first_page: p,
                    last_page: p,
                    offset,
                };
            } else {
                let n = size.div_ceil(cfg.page_size);
                let first = pages.len();
                for k in 0..n {
                    pages.push(if k + 1 == n {
                        size - (n - 1) * cfg.page_size
                    } else {
                        cfg.page_size
                    });
                    cut_inside.push(k == 0);
                }
                open = None;
                tensors[i] = TensorSlot {
                    size,
                    first_page: first as u32,
                    last_page: (pages.len() - 1) as u32,
                    offset: 0,
                };
            }
        }
        let mut prefix = Vec::with_capacity(pages.len() + 1);
        prefix.push(0u64);
        for &p in &pages {
            prefix.push(prefix[prefix.len() - 1].saturating_add(p));
        }
        // cut[w] for w < pages: page w starts something; cut[pages] always.
        let mut cut = cut_inside;
        cut.push(true);
        Ok(Self {
            tensors,
            pages,
            prefix,
            cut,
            order,
        })
    }

    /// Number of pages.
    pub fn page_count(&self) -> u32 {
        self.pages.len() as u32
    }

    /// Total bytes of all pages.
    pub fn total_bytes(&self) -> u64 {
        self.prefix[self.pages.len()]
    }

    /// The highest valid watermark whose pages take at most `bytes`.
    pub fn max_watermark_within(&self, bytes: u64) -> u32 {
        (0..=self.pages.len())
            .rev()
            .find(|&w| self.cut[w] && self.prefix[w] <= bytes)
            .unwrap_or(0) as u32
    }

    /// The highest valid watermark at or below `w`.
    pub fn snap_down(&self, w: u32) -> u32 {
        (0..=w as usize).rev().find(|&x| self.cut[x]).unwrap_or(0) as u32
    }

    /// Is tensor `i` resident under watermark `w`?
    pub fn is_resident(&self, i: usize, w: u32) -> bool {
        self.tensors[i].last_page < w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_needing_more_than_max_pages_are_refused_before_allocating() {
        let cfg = LayoutConfig::default();
        // A header's worth of petabyte tensors: refused at once, sizes named.
        let err = Layout::new(&[1 << 60, 1 << 60, 7], &cfg).unwrap_err();
        let LayoutError::TooManyPages { bytes, pages, .. } = err.clone() else {
            panic!("{err:?}");
        };
        assert_eq!(bytes, (1 << 61) + 7);
        assert!(pages > MAX_PAGES);
        assert!(err.to_string().contains("pages"), "{err}");
        // Many small tensors summing past the limit too.
        let many = vec![cfg.page_size; (MAX_PAGES + 1) as usize];
        assert!(matches!(
            Layout::new(&many, &cfg),
            Err(LayoutError::TooManyPages { .. })
        ));
        // Exactly at the limit is fine.
        let at = Layout::new(&[MAX_PAGES * cfg.page_size], &cfg).unwrap();
        assert_eq!(u64::from(at.page_count()), MAX_PAGES);
    }

    #[test]
    fn tiny_first_no_straddle_and_spanning() {
        let cfg = LayoutConfig {
            page_size: 1000,
            align: 8,
            tiny_threshold: 10,
        };
        // load order: big 600, tiny 5, huge 2500, mid 500, tiny 3
        let l = Layout::new(&[600, 5, 2500, 500, 3], &cfg).unwrap();
        assert_eq!(l.order, vec![1, 4, 0, 2, 3]);
        assert_eq!(
            l.tensors[1],
            TensorSlot {
                size: 5,
                first_page: 0,
                last_page: 0,
                offset: 0
            }
        );
        assert_eq!(l.tensors[4].offset, 8);
        assert_eq!(
            l.tensors[0],
            TensorSlot {
                size: 600,
                first_page: 0,
                last_page: 0,
                offset: 16
            }
        );
        assert_eq!(
            l.tensors[2],
            TensorSlot {
                size: 2500,
                first_page: 1,
                last_page: 3,
                offset: 0
            }
        );
        assert_eq!(
            l.tensors[3],
            TensorSlot {
                size: 500,
                first_page: 4,
                last_page: 4,
                offset: 0
            }
        );
        assert_eq!(l.pages, vec![616, 1000, 1000, 500, 500]);
        assert_eq!(l.cut, vec![true, true, false, false, true, true]);
        assert_eq!(
            l.max_watermark_within(2615),
            1,
            "cannot stop inside the 2500 B tensor"
        );
        assert_eq!(l.max_watermark_within(3116), 4);
        assert_eq!(l.snap_down(3), 1);
        assert!(Layout::new(&[1], &LayoutConfig { align: 3, ..cfg }).is_err());
    }

    #[test]
    fn ranks_order_the_tensors_past_the_tiny_ones() {
        let cfg = LayoutConfig {
            page_size: 1000,
            align: 8,
            tiny_threshold: 10,
        };
        // Load order: four 600 B tensors of blocks 0-3 and a tiny one;
        // ranks 0, 2, 1, 3 (bit reversal over 2 bits) and the tiny one's.
        let l = Layout::ranked(&[600, 600, 600, 600, 5], &[0, 2, 1, 3, 0], &cfg).unwrap();
        assert_eq!(l.order, vec![4, 0, 2, 1, 3]);
        // A watermark of two pages keeps blocks 0 and 2 resident.
        let resident: Vec<bool> = (0..4).map(|i| l.is_resident(i, 2)).collect();
        assert_eq!(resident, [true, false, true, false]);
        // Equal ranks (and no ranks) keep load order.
        let same = Layout::ranked(&[600, 600, 5], &[1, 1, 1], &cfg).unwrap();
        assert_eq!(same.order, Layout::new(&[600, 600, 5], &cfg).unwrap().order);
    }
}
