//! What each wgpu backend's shader translator can take of our modules.
//!
//! wgpu hands every WGSL module to naga, which writes SPIR-V (Vulkan), MSL
//! (Metal), HLSL (DX12) or GLSL (GL). A module that uses something a
//! backend's writer or its adapters lack fails at pipeline creation on a
//! user's machine, so the runtime must never choose it there.
//! `tests/it/translate.rs` translates every module the runtime can create
//! ([`crate::all`] in both activation types and every generated variant)
//! with the options wgpu 30 uses, and fails unless each one either
//! translates or needs something listed here, with the reason; gpu's
//! chooser tests feed each backend's capabilities to the kernel choosers
//! and check that nothing they pick needs a [`refusal`].

use std::fmt;

/// A wgpu backend, as far as its shader translation goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Vulkan: naga writes SPIR-V.
    Vulkan,
    /// Metal: naga writes MSL.
    Metal,
    /// DirectX 12: naga writes HLSL, which DXC compiles.
    Dx12,
    /// OpenGL / GLES: naga writes GLSL.
    Gl,
}

impl Backend {
    /// Every backend.
    pub const ALL: [Backend; 4] = [Backend::Vulkan, Backend::Metal, Backend::Dx12, Backend::Gl];
}

/// `vulkan`, `metal`, `dx12`, `gl`: wgpu's names.
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Vulkan => "vulkan",
            Backend::Metal => "metal",
            Backend::Dx12 => "dx12",
            Backend::Gl => "gl",
        })
    }
}

/// Something a module may use beyond core WGSL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Need {
    /// f16 arithmetic or storage (`enable f16;`, wgpu's `SHADER_F16`).
    F16,
    /// Subgroup operations (wgpu's `SUBGROUP`).
    Subgroups,
    /// Cooperative matrices of 8×8 (`enable wgpu_cooperative_matrix;`,
    /// wgpu's `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    CoopMatrix8,
    /// Cooperative matrices of 16×16.
    CoopMatrix16,
}

impl Need {
    /// Every need.
    pub const ALL: [Need; 4] = [
        Need::F16,
        Need::Subgroups,
        Need::CoopMatrix8,
        Need::CoopMatrix16,
    ];
}

/// `f16`, `subgroups`, `8x8 cooperative matrices`, `16x16 cooperative matrices`.
impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Need::F16 => "f16",
            Need::Subgroups => "subgroups",
            Need::CoopMatrix8 => "8x8 cooperative matrices",
            Need::CoopMatrix16 => "16x16 cooperative matrices",
        })
    }
}

/// A module needing `need` cannot run on `backend`, for `reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The backend.
    pub backend: Backend,
    /// What its modules cannot use there.
    pub need: Need,
    /// naga's writer for the backend rejects such a module (the
    /// translation test checks that it still does); otherwise the refusal
    /// is wgpu's adapter never offering the feature, or the driver's
    /// compiler lacking what naga writes.
    pub writer_fails: bool,
    /// Why, from wgpu 30's and naga 30's sources.
    pub reason: &'static str,
}

/// Every backend/need pair that cannot run. A pair not listed translates
/// (the translation test checks each module that uses it).
///
/// | backend | need | why |
/// |---|---|---|
/// | metal | 16×16 cooperative matrices | Metal's simdgroup matrices are 8×8 (wgpu-hal lists only 8×8 configurations); naga writes `simdgroup_half16x16`, which Metal does not have |
/// | dx12 | cooperative matrices | wgpu-hal's DX12 adapter never offers them; naga's HLSL writer has none (`Unimplemented`) |
/// | gl | cooperative matrices | wgpu-hal's GL adapter never offers them |
/// | gl | f16 | wgpu-hal's GL adapter never offers `SHADER_F16`; naga's GLSL writer has no f16 (`UnsupportedScalar`) |
/// | gl | subgroups | wgpu-hal's GL adapter never offers `SUBGROUP` |
pub const REFUSALS: &[Refusal] = &[
    Refusal {
        backend: Backend::Metal,
        need: Need::CoopMatrix16,
        writer_fails: false,
        reason: "Metal's simdgroup matrices are 8x8 only (wgpu-hal 30 lists no other \
                 configuration); naga 30 writes `simdgroup_half16x16`, which Metal lacks",
    },
    Refusal {
        backend: Backend::Dx12,
        need: Need::CoopMatrix8,
        writer_fails: true,
        reason: "wgpu-hal 30's DX12 adapter never offers EXPERIMENTAL_COOPERATIVE_MATRIX, \
                 and naga 30's HLSL writer has no cooperative matrices",
    },
    Refusal {
        backend: Backend::Dx12,
        need: Need::CoopMatrix16,
        writer_fails: true,
        reason: "wgpu-hal 30's DX12 adapter never offers EXPERIMENTAL_COOPERATIVE_MATRIX, \
                 and naga 30's HLSL writer has no cooperative matrices",
    },
    Refusal {
        backend: Backend::Gl,
        need: Need::CoopMatrix8,
        writer_fails: false,
        reason: "wgpu-hal 30's GL adapter never offers EXPERIMENTAL_COOPERATIVE_MATRIX",
    },
    Refusal {
        backend: Backend::Gl,
        need: Need::CoopMatrix16,
        writer_fails: false,
        reason: "wgpu-hal 30's GL adapter never offers EXPERIMENTAL_COOPERATIVE_MATRIX",
    },
    Refusal {
        backend: Backend::Gl,
        need: Need::F16,
        writer_fails: true,
        reason: "wgpu-hal 30's GL adapter never offers SHADER_F16, and naga 30's GLSL \
                 writer has no f16",
    },
    Refusal {
        backend: Backend::Gl,
        need: Need::Subgroups,
        writer_fails: false,
        reason: "wgpu-hal 30's GL adapter never offers SUBGROUP",
    },
];

/// Why a module needing `need` cannot run on `backend`, or `None` where it
/// can (given an adapter of that backend with the feature).
pub fn refusal(backend: Backend, need: Need) -> Option<&'static str> {
    find(backend, need).map(|r| r.reason)
}

/// The row of [`REFUSALS`] for `backend` and `need`.
pub fn find(backend: Backend, need: Need) -> Option<&'static Refusal> {
    REFUSALS
        .iter()
        .find(|r| r.backend == backend && r.need == need)
}
