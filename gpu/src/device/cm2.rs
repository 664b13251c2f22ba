//! NVIDIA's cooperative matrices 2 (`VK_NV_cooperative_matrix2`): what an
//! adapter offers of them ([`Cm2Caps`]) and the feature struct a device
//! opened by [`super::device_open`] enables, for the SPIR-V GEMM
//! (`shaders/spirv/`; wgpu knows nothing of the extension, so this reads
//! the Vulkan structs itself: ash 0.38 predates them).

/// One supported combination of workgroup-scope (or other) flexible matrix
/// dimensions (`VkCooperativeMatrixFlexibleDimensionsPropertiesNV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FlexibleDims {
    /// Rows of A, C and the result must be multiples of this.
    pub m_granularity: u32,
    /// Columns of B, C and the result must be multiples of this.
    pub n_granularity: u32,
    /// Columns of A and rows of B must be multiples of this.
    pub k_granularity: u32,
    /// `VkComponentTypeKHR` of A, B, C and the result (0: f16, 1: f32, 3:
    /// int8, 5: int32).
    pub types: [i32; 4],
    /// `VkScopeKHR` (2: workgroup, 3: subgroup).
    pub scope: i32,
    /// Invocations of the workgroup for workgroup scope.
    pub workgroup_invocations: u32,
}

/// `VkComponentTypeKHR` of f16.
pub const COMPONENT_F16: i32 = 0;
/// `VkComponentTypeKHR` of f32.
pub const COMPONENT_F32: i32 = 1;
/// `VkComponentTypeKHR` of int8.
pub const COMPONENT_S8: i32 = 3;
/// `VkComponentTypeKHR` of int32.
pub const COMPONENT_S32: i32 = 5;
/// `VkScopeKHR` of a workgroup.
pub const SCOPE_WORKGROUP: i32 = 2;

/// What an adapter offers of `VK_NV_cooperative_matrix2`, and the limits
/// the SPIR-V GEMM's tiles must fit.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Cm2Caps {
    /// Vulkan 1.3 on the instance and the device (the kernels are SPIR-V
    /// 1.6, which the extension requires).
    pub vulkan_1_3: bool,
    /// `cooperativeMatrixWorkgroupScope`.
    pub workgroup_scope: bool,
    /// `cooperativeMatrixFlexibleDimensions`.
    pub flexible_dimensions: bool,
    /// `cooperativeMatrixPerElementOperations` (the bias epilogue).
    pub per_element_operations: bool,
    /// `cooperativeMatrixTensorAddressing`.
    pub tensor_addressing: bool,
    /// `cooperativeMatrixConversions`.
    pub conversions: bool,
    /// `cooperativeMatrixReductions` (flash attention's row maxima and
    /// sums).
    pub reductions: bool,
    /// `cooperativeMatrixWorkgroupScopeMaxWorkgroupSize`.
    pub max_workgroup_size: u32,
    /// `cooperativeMatrixFlexibleDimensionsMaxDimension`.
    pub max_dimension: u32,
    /// `cooperativeMatrixWorkgroupScopeReservedSharedMemory`: the driver's
    /// staging, out of `maxComputeSharedMemorySize`.
    pub reserved_shared_memory: u32,
    /// `maxComputeSharedMemorySize`.
    pub max_shared_memory: u32,
    /// The subgroup size (`VkPhysicalDeviceSubgroupProperties`): a
    /// workgroup-scope kernel's invocations must be a power-of-two multiple
    /// of it (VUID-VkPipelineShaderStageCreateInfo-module-10169).
    pub subgroup_size: u32,
    /// Streaming multiprocessors (`VK_NV_shader_sm_builtins`'
    /// `shaderSMCount`; 0 where the driver does not say): how many
    /// workgroups fill the device, for the small-grid GEMM tiles.
    pub sm_count: u32,
    /// The flexible-dimension combinations the driver lists.
    pub flexible: Vec<FlexibleDims>,
}

impl Cm2Caps {
    /// The features the GEMM needs that are missing, by their Vulkan names
    /// (empty: all there).
    pub fn missing_features(&self) -> Vec<&'static str> {
        [
            (self.vulkan_1_3, "Vulkan 1.3"),
            (self.workgroup_scope, "cooperativeMatrixWorkgroupScope"),
            (
                self.flexible_dimensions,
                "cooperativeMatrixFlexibleDimensions",
            ),
            (
                self.per_element_operations,
                "cooperativeMatrixPerElementOperations",
            ),
            (self.tensor_addressing, "cooperativeMatrixTensorAddressing"),
        ]
        .into_iter()
        .filter(|(has, _)| !has)
        .map(|(_, name)| name)
        .collect()
    }

    /// The features flash attention needs besides the GEMM's that are
    /// missing (its probabilities change type and use; its softmax reduces
    /// rows).
    pub fn flash_missing_features(&self) -> Vec<&'static str> {
        let mut missing = self.missing_features();
        if !self.conversions {
            missing.push("cooperativeMatrixConversions");
        }
        if !self.reductions {
            missing.push("cooperativeMatrixReductions");
        }
        missing
    }

    /// Every feature flash attention needs is there
    /// ([`Self::flash_missing_features`] empty), without allocating.
    pub fn flash_complete(&self) -> bool {
        self.complete() && self.conversions && self.reductions
    }

    /// Every feature the GEMM needs is there ([`Self::missing_features`]
    /// empty), without allocating.
    pub fn complete(&self) -> bool {
        self.vulkan_1_3
            && self.workgroup_scope
            && self.flexible_dimensions
            && self.per_element_operations
            && self.tensor_addressing
    }

    /// Shared memory a workgroup-scope kernel may declare itself.
    pub fn shared_memory_left(&self) -> u32 {
        self.max_shared_memory
            .saturating_sub(self.reserved_shared_memory)
    }

    /// Why a kernel on subgroup-scope matrices of `invocations` declaring
    /// `shared_bytes` cannot run here, or `None`: it is written for
    /// 32-invocation subgroups, may take all of the device's shared memory
    /// (the driver reserves some for workgroup-scope matrices only) and
    /// its workgroup must fit the device's limit in whole subgroups, any
    /// number of them (the power of two [`Self::misfit`] asks is the
    /// workgroup-scope matrices'; the 16 x 16 x 16 f16 and 16 x 16 x 32 s8
    /// products at subgroup scope are KHR cooperative-matrix configurations
    /// NVIDIA's drivers list).
    pub fn subgroup_misfit(&self, invocations: u32, shared_bytes: u32) -> Option<Cm2Misfit> {
        if self.subgroup_size != SUBGROUP_KERNELS || !invocations.is_multiple_of(SUBGROUP_KERNELS) {
            Some(Cm2Misfit::Subgroup(invocations, self.subgroup_size))
        } else if shared_bytes > self.max_shared_memory {
            Some(Cm2Misfit::Shared(shared_bytes, self.max_shared_memory, 0))
        } else if invocations > self.max_workgroup_size {
            Some(Cm2Misfit::Invocations(invocations, self.max_workgroup_size))
        } else {
            None
        }
    }

    /// Why a kernel of footprint `k` cannot run here, or `None`: the
    /// device's limits and the driver's listed matrix shapes.
    pub fn misfit(&self, k: &Cm2Footprint<'_>) -> Option<Cm2Misfit> {
        if k.invocations > self.max_workgroup_size {
            return Some(Cm2Misfit::Invocations(
                k.invocations,
                self.max_workgroup_size,
            ));
        }
        let sg = self.subgroup_size;
        if sg == 0 || !k.invocations.is_multiple_of(sg) || !(k.invocations / sg).is_power_of_two() {
            return Some(Cm2Misfit::Subgroup(k.invocations, sg));
        }
        let largest = k.products.iter().flatten().copied().max().unwrap_or(0);
        if largest > self.max_dimension {
            return Some(Cm2Misfit::Dimension(largest, self.max_dimension));
        }
        if k.shared_bytes > self.shared_memory_left() {
            return Some(Cm2Misfit::Shared(
                k.shared_bytes,
                self.shared_memory_left(),
                self.reserved_shared_memory,
            ));
        }
        let tiles = |d: &FlexibleDims, m: u32, n: u32| {
            d.scope == SCOPE_WORKGROUP
                && d.workgroup_invocations == k.invocations
                && d.m_granularity > 0
                && d.n_granularity > 0
                && m.is_multiple_of(d.m_granularity)
                && n.is_multiple_of(d.n_granularity)
        };
        let listed = k.products.iter().all(|&[m, n, kk]| {
            self.flexible.iter().any(|d| {
                tiles(d, m, n)
                    && d.types == k.types
                    && d.k_granularity > 0
                    && kk.is_multiple_of(d.k_granularity)
            })
        });
        let converted = k.converted.iter().all(|&ty| {
            k.products.iter().all(|&[m, n, _]| {
                self.flexible
                    .iter()
                    .any(|d| tiles(d, m, n) && (d.types[2] == ty || d.types[3] == ty))
            })
        });
        (!listed || !converted).then_some(Cm2Misfit::Unlisted)
    }
}

/// Invocations of a subgroup the subgroup-scope kernels are written for.
const SUBGROUP_KERNELS: u32 = 32;

/// `cm2` (what a device enabled of the extension, `None` where it did not)
/// where it has every feature `missing` finds wanting for a kind of kernel
/// ([`Cm2Caps::missing_features`], [`Cm2Caps::flash_missing_features`]),
/// or why not.
pub fn enabled_with(
    cm2: Option<&Cm2Caps>,
    missing: fn(&Cm2Caps) -> Vec<&'static str>,
) -> Result<&Cm2Caps, String> {
    let Some(caps) = cm2 else {
        return Err("VK_NV_cooperative_matrix2 is not enabled on this device (not offered, a feature missing, or DYNVRAM_SPIRV_GEMM=off)".into());
    };
    let missing = missing(caps);
    if !missing.is_empty() {
        return Err(format!(
            "VK_NV_cooperative_matrix2 lacks {}",
            missing.join(", ")
        ));
    }
    Ok(caps)
}

/// What a workgroup-scope kernel asks of the device, for
/// [`Cm2Caps::misfit`].
#[derive(Debug, Clone, Copy)]
pub struct Cm2Footprint<'a> {
    /// Invocations of a workgroup.
    pub invocations: u32,
    /// (M, N, K) of every product.
    pub products: &'a [[u32; 3]],
    /// Shared memory the kernel declares itself.
    pub shared_bytes: u32,
    /// `VkComponentTypeKHR` of the products' A, B, C and result.
    pub types: [i32; 4],
    /// The accumulator types results are converted to (each must be listed
    /// on every product's output shape: every matrix type of a module
    /// matches an entry, VUID-RuntimeSpirv-cooperativeMatrixFlexibleDimensions-10165).
    pub converted: &'a [i32],
}

/// Why a kernel does not fit a device ([`Cm2Caps::misfit`]): data,
/// formatted only when asked (launch paths choose without formatting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cm2Misfit {
    /// Invocations over the workgroup-scope maximum.
    Invocations(u32, u32),
    /// Invocations not a power-of-two multiple of the subgroup size.
    Subgroup(u32, u32),
    /// A matrix edge over the flexible-dimension maximum.
    Dimension(u32, u32),
    /// Shared memory over what the driver leaves (bytes, left, reserved).
    Shared(u32, u32, u32),
    /// No listed shape of these types and invocations tiles a product.
    Unlisted,
}

impl std::fmt::Display for Cm2Misfit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Invocations(n, max) => {
                write!(
                    f,
                    "{n} invocations exceed the workgroup-scope maximum {max}"
                )
            }
            Self::Subgroup(n, sg) => write!(
                f,
                "{n} invocations are not a power-of-two multiple of the subgroup size {sg}"
            ),
            Self::Dimension(n, max) => write!(
                f,
                "a {n}-wide matrix exceeds the flexible-dimension maximum {max}"
            ),
            Self::Shared(n, left, reserved) => write!(
                f,
                "{n} bytes of shared memory exceed the {left} left beside the driver's {reserved} reserved"
            ),
            Self::Unlisted => write!(
                f,
                "the driver lists no workgroup-scope shape of these types (and of the f16 or f32 accumulators it converts to) and invocations that tiles it"
            ),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
pub(super) use imp::{Cm2Features, query};

#[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
mod imp {
    use std::ffi::{CStr, c_void};

    use ash::vk;

    use super::{Cm2Caps, FlexibleDims};

    /// The extension's name.
    pub(crate) const NAME: &CStr = c"VK_NV_cooperative_matrix2";

    /// `VkPhysicalDeviceCooperativeMatrix2FeaturesNV`.
    #[repr(C)]
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Cm2Features {
        s_type: vk::StructureType,
        p_next: *mut c_void,
        workgroup_scope: vk::Bool32,
        flexible_dimensions: vk::Bool32,
        reductions: vk::Bool32,
        conversions: vk::Bool32,
        per_element_operations: vk::Bool32,
        tensor_addressing: vk::Bool32,
        block_loads: vk::Bool32,
    }

    // SAFETY: the struct is the Vulkan struct of that type, `sType` first.
    unsafe impl vk::ExtendsPhysicalDeviceFeatures2 for Cm2Features {}
    // SAFETY: as above; the extension lists it as extending `VkDeviceCreateInfo`.
    unsafe impl vk::ExtendsDeviceCreateInfo for Cm2Features {}

    impl Default for Cm2Features {
        fn default() -> Self {
            Self {
                s_type: vk::StructureType::from_raw(1_000_593_000),
                p_next: std::ptr::null_mut(),
                workgroup_scope: 0,
                flexible_dimensions: 0,
                reductions: 0,
                conversions: 0,
                per_element_operations: 0,
                tensor_addressing: 0,
                block_loads: 0,
            }
        }
    }

    impl Cm2Features {
        /// The features of `caps` that the GEMM uses, to enable (only those
        /// the adapter listed).
        pub(crate) fn enabling(caps: &Cm2Caps) -> Self {
            Self {
                workgroup_scope: caps.workgroup_scope.into(),
                flexible_dimensions: caps.flexible_dimensions.into(),
                conversions: caps.conversions.into(),
                reductions: caps.reductions.into(),
                per_element_operations: caps.per_element_operations.into(),
                tensor_addressing: caps.tensor_addressing.into(),
                ..Self::default()
            }
        }

        /// The extension's name.
        pub(crate) fn extension() -> &'static CStr {
            NAME
        }
    }

    /// `VkPhysicalDeviceCooperativeMatrix2PropertiesNV`.
    #[repr(C)]
    struct Cm2Properties {
        s_type: vk::StructureType,
        p_next: *mut c_void,
        max_workgroup_size: u32,
        max_dimension: u32,
        reserved_shared_memory: u32,
    }

    // SAFETY: the Vulkan struct of that type, `sType` first.
    unsafe impl vk::ExtendsPhysicalDeviceProperties2 for Cm2Properties {}

    /// `VkCooperativeMatrixFlexibleDimensionsPropertiesNV`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct FlexibleRaw {
        s_type: vk::StructureType,
        p_next: *mut c_void,
        m_granularity: u32,
        n_granularity: u32,
        k_granularity: u32,
        a_type: i32,
        b_type: i32,
        c_type: i32,
        result_type: i32,
        saturating_accumulation: vk::Bool32,
        scope: i32,
        workgroup_invocations: u32,
    }

    impl Default for FlexibleRaw {
        fn default() -> Self {
            Self {
                s_type: vk::StructureType::from_raw(1_000_593_001),
                p_next: std::ptr::null_mut(),
                m_granularity: 0,
                n_granularity: 0,
                k_granularity: 0,
                a_type: 0,
                b_type: 0,
                c_type: 0,
                result_type: 0,
                saturating_accumulation: 0,
                scope: 0,
                workgroup_invocations: 0,
            }
        }
    }

    type FlexibleFn =
        unsafe extern "system" fn(vk::PhysicalDevice, *mut u32, *mut FlexibleRaw) -> vk::Result;

    /// What `hal` offers of the extension, or `None` where it does not list
    /// it (or lacks `VK_KHR_cooperative_matrix`, which it builds on).
    pub(crate) fn query(hal: &wgpu::hal::vulkan::Adapter) -> Option<Cm2Caps> {
        let caps = hal.physical_device_capabilities();
        if !caps.supports_extension(NAME)
            || !caps.supports_extension(ash::khr::cooperative_matrix::NAME)
        {
            return None;
        }
        let shared = hal.shared_instance();
        let instance = shared.raw_instance();
        let phd = hal.raw_physical_device();
        let props = caps.properties();
        let v13 = shared.instance_api_version() >= vk::API_VERSION_1_3
            && props.api_version >= vk::API_VERSION_1_3;
        let mut features = Cm2Features::default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut sm = vk::PhysicalDeviceShaderSMBuiltinsPropertiesNV::default();
        let sm_listed = caps.supports_extension(ash::nv::shader_sm_builtins::NAME);
        let mut properties = Cm2Properties {
            s_type: vk::StructureType::from_raw(1_000_593_002),
            p_next: std::ptr::null_mut(),
            max_workgroup_size: 0,
            max_dimension: 0,
            reserved_shared_memory: 0,
        };
        // SAFETY: read-only queries on this instance's physical device, with
        // structs of the types their sTypes name (the extension is listed,
        // and the instance is Vulkan 1.1+ where wgpu exposes an adapter).
        unsafe {
            let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut features);
            instance.get_physical_device_features2(phd, &mut f2);
            let mut p2 = vk::PhysicalDeviceProperties2::default()
                .push_next(&mut properties)
                .push_next(&mut subgroup);
            if sm_listed {
                p2 = p2.push_next(&mut sm);
            }
            instance.get_physical_device_properties2(phd, &mut p2);
        }
        let flexible = flexible_dims(hal);
        Some(Cm2Caps {
            vulkan_1_3: v13,
            workgroup_scope: features.workgroup_scope != 0,
            flexible_dimensions: features.flexible_dimensions != 0,
            per_element_operations: features.per_element_operations != 0,
            tensor_addressing: features.tensor_addressing != 0,
            conversions: features.conversions != 0,
            reductions: features.reductions != 0,
            max_workgroup_size: properties.max_workgroup_size,
            max_dimension: properties.max_dimension,
            reserved_shared_memory: properties.reserved_shared_memory,
            max_shared_memory: props.limits.max_compute_shared_memory_size,
            subgroup_size: subgroup.subgroup_size,
            sm_count: sm.shader_sm_count,
            flexible,
        })
    }

    /// The driver's flexible-dimension list (empty where the entry point is
    /// missing or fails).
    fn flexible_dims(hal: &wgpu::hal::vulkan::Adapter) -> Vec<FlexibleDims> {
        let shared = hal.shared_instance();
        let name = c"vkGetPhysicalDeviceCooperativeMatrixFlexibleDimensionsPropertiesNV";
        // SAFETY: an instance-level entry point of a listed extension, looked
        // up on the instance that enumerated the physical device.
        let Some(f) = (unsafe {
            shared
                .entry()
                .get_instance_proc_addr(shared.raw_instance().handle(), name.as_ptr())
        }) else {
            return Vec::new();
        };
        // SAFETY: the entry point of that name has this signature.
        let f: FlexibleFn = unsafe { std::mem::transmute(f) };
        let phd = hal.raw_physical_device();
        let mut count = 0u32;
        // SAFETY: the two-call idiom: the count first, then that many structs
        // with their sType set.
        let raw = unsafe {
            if f(phd, &mut count, std::ptr::null_mut()) != vk::Result::SUCCESS {
                return Vec::new();
            }
            let mut raw = vec![FlexibleRaw::default(); count as usize];
            let r = f(phd, &mut count, raw.as_mut_ptr());
            if r != vk::Result::SUCCESS && r != vk::Result::INCOMPLETE {
                return Vec::new();
            }
            raw.truncate(count as usize);
            raw
        };
        raw.iter()
            .map(|r| FlexibleDims {
                m_granularity: r.m_granularity,
                n_granularity: r.n_granularity,
                k_granularity: r.k_granularity,
                types: [r.a_type, r.b_type, r.c_type, r.result_type],
                scope: r.scope,
                workgroup_invocations: r.workgroup_invocations,
            })
            .collect()
    }
}

/// What `adapter` offers of `VK_NV_cooperative_matrix2`, or `None` (not
/// Vulkan, or the extension is not listed).
pub fn adapter_cm2(adapter: &wgpu::Adapter) -> Option<Cm2Caps> {
    #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
    {
        // SAFETY: read-only capability queries while `adapter` is alive.
        let hal = unsafe { adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
        query(&hal)
    }
    #[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
    {
        let _ = adapter;
        None
    }
}

/// Which GEMMs may take the SPIR-V cooperative-matrix-2 kernels (the
/// embedder's choice; the CLI reads `DYNVRAM_SPIRV_GEMM`), where the device
/// has `VK_NV_cooperative_matrix2` with every feature they need (it then
/// opens with the extension enabled). Raw SPIR-V is not validated by wgpu:
/// a kind of kernel runs by default once its reference tests have passed
/// on an NVIDIA GPU (`bench/spirv_check.sh`). On the H100 (2026-12-06,
/// session 24) every one did: the float kernels against the reference, the
/// integer ones bit for bit against ComfyUI's epilogue on the GPU's codes,
/// and the flash-attention kernels, which the same switch enables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpirvGemm {
    /// Every GEMM that has a kernel: f16, bf16, int8 and int4 weights.
    #[default]
    Auto,
    /// Float GEMMs (f16 and bf16 weights); integer ones on WGSL.
    Float,
    /// Never: the extension stays disabled and the WGSL kernels run.
    Off,
}

impl SpirvGemm {
    /// Whether a GEMM of integer (`true`) or float weights may take a
    /// SPIR-V kernel.
    pub fn allows(self, integer: bool) -> bool {
        match self {
            Self::Auto => true,
            Self::Float => !integer,
            Self::Off => false,
        }
    }
}

impl std::str::FromStr for SpirvGemm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" | "on" | "all" => Ok(Self::Auto),
            "float" => Ok(Self::Float),
            "" | "off" | "0" => Ok(Self::Off),
            other => Err(format!(
                "SPIR-V GEMM `{other}`: want auto (every GEMM), float or off"
            )),
        }
    }
}

/// How a float layer of bf16 weights takes the SPIR-V GEMM (the embedder's
/// choice; the CLI reads `DYNVRAM_CM2_BF16`). No cooperative-matrix type
/// for bf16 in the compiler the kernels are built with, so the bf16 kernels
/// convert each K step's weights to f16 in a shared tile (122-142 TFLOP/s
/// at FLUX.1's shapes on the H100); the f16 kernels load both operands by
/// tensor addressing (219-240). [`Self::ViaF16`] converts the
/// layer's weights to f16 in pieces of at most [`CONVERTED_PIECE_BYTES`] (a
/// scratch buffer, one launch a piece) and runs an f16 kernel on each: the
/// same values the bf16 kernels multiply. Models' plans count that scratch
/// (`ops::linear::converted_piece_bytes`); where a budget still has no room for
/// it the layer takes the bf16 kernels. [`Self::Auto`], the default, does
/// that for streamed weights and converts resident ones once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cm2Bf16 {
    /// The bf16 kernels (`gemm_cm2_bf16_*`).
    Staged,
    /// Converted to f16 a piece at a time every pass, then the f16 kernels.
    ViaF16,
    /// As [`Self::ViaF16`], but resident weights are converted once, in
    /// place, as they are uploaded (`ops::linear::resident_bf16_as_f16`),
    /// and read as f16 by every kernel from then on, on any device (the
    /// WGSL kernels read them as any f16 weights).
    ViaF16Resident,
    /// The default: [`Self::ViaF16Resident`] where the device runs the f16
    /// SPIR-V GEMMs (whose prefills convert every bf16 layer to f16 anyway),
    /// else [`Self::ViaF16`]. On the H200 (session 30) the conversion once
    /// took a Llama-7B prefill from 9,428 to 11,800 tok/s with decode level
    /// (211.0 against 211.2 tok/s, the GEMVs reading f16 through
    /// `unpack2x16float`); a FLUX.1 step from 0.422 to 0.409 s on the H100
    /// (session 29). Weights below f16's normal range (2^-14) lose bits in
    /// f16, f32 compute included; [`Self::ViaF16`] keeps them bf16.
    #[default]
    Auto,
}

impl Cm2Bf16 {
    /// The f16 kernels on converted weights (every variant but
    /// [`Self::Staged`]).
    pub fn via_f16(self) -> bool {
        !matches!(self, Self::Staged)
    }
}

/// Bytes of converted weights one piece holds at most (f16 for
/// [`Cm2Bf16::ViaF16`], int8 for [`Cm2Int4::ViaInt8`]) by default: the
/// scratch it takes for inputs of fewer than [`CONVERTED_LONG_ROWS`] rows
/// (a pass with room to spare lets it grow:
/// `LinearScratch::set_piece_room`).
pub const CONVERTED_PIECE_BYTES: u64 = 64 << 20;

/// Inputs of this many rows or more convert half a [`CONVERTED_PIECE_BYTES`]
/// piece at a time ([`converted_piece_limit`]).
pub const CONVERTED_LONG_ROWS: u64 = 2048;

/// The default piece size for inputs of `m` rows. A long input fills the GPU with
/// a small piece's tiles (FLUX.1's 4608 rows are 36 row tiles: a 32 MiB
/// piece of its widest layer is 756 workgroups), and the half piece keeps
/// bf16 FLUX.1-dev's plan at 1024² within 2 GiB by whole blocks; a short
/// one (a 512-token prefill, 4 row tiles) needs wide pieces for enough
/// workgroups.
pub fn converted_piece_limit(m: u64) -> u64 {
    if m >= CONVERTED_LONG_ROWS {
        CONVERTED_PIECE_BYTES / 2
    } else {
        CONVERTED_PIECE_BYTES
    }
}

/// How an integer layer of int4 weights (`convrot_w4a4`) takes the SPIR-V
/// GEMM (the embedder's choice; the CLI reads `DYNVRAM_CM2_INT4`). int4 has
/// no cooperative-matrix type, so the int4 kernels widen each K step's
/// weights to int8 in a shared tile (106-195 TOPS at FLUX.1's shapes on the
/// H100); the int8 kernels' fast loop loads both operands by tensor
/// addressing (260-326). [`Self::ViaInt8`], the default, widens the
/// layer's weights to int8 in pieces (the same scratch and sizes as
/// [`Cm2Bf16::ViaF16`]'s, a byte a weight) and runs an int8 kernel on
/// each: the same integers, so the same exact sums and outputs. Where the
/// scratch has no room, the int4 kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cm2Int4 {
    /// The int4 kernels (`gemm_cm2_w4_*`).
    Staged,
    /// Widened to int8 a piece at a time, then the int8 kernels.
    #[default]
    ViaInt8,
}

impl std::str::FromStr for Cm2Int4 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "staged" | "int4" => Ok(Self::Staged),
            "" | "int8" | "via-int8" => Ok(Self::ViaInt8),
            other => Err(format!(
                "int4 SPIR-V GEMM `{other}`: want staged (the int4 kernels) or int8 (widened, then the int8 kernels)"
            )),
        }
    }
}

impl std::str::FromStr for Cm2Bf16 {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "" | "staged" | "bf16" => Ok(Self::Staged),
            "f16" | "via-f16" => Ok(Self::ViaF16),
            "f16-resident" => Ok(Self::ViaF16Resident),
            "auto" => Ok(Self::Auto),
            other => Err(format!(
                "bf16 SPIR-V GEMM `{other}`: want auto (the default), staged (the bf16 kernels), f16 (converted every pass, then the f16 kernels) or f16-resident (resident weights converted once as they load)"
            )),
        }
    }
}

/// Whether a GEMM whose tiles fill at most half the GPU, or the tiles of
/// a grid's last wave where they fill at most half of it, split K across
/// workgroups (the embedder's choice; the CLI reads `DYNVRAM_CM2_SPLIT`).
/// Prefill's 512 rows on a 4096-wide layer are 64 tiles of 128 x 256 on
/// 132 multiprocessors: both rules split K in as many parts as fill the
/// GPU (at most 8, where K is at least [`SPLIT_MIN_K`] and the kernel has
/// a split variant), as llama.cpp does; [`Self::Off`] takes the narrower
/// tiles for small grids instead. FLUX.1's `linear2` (4608 x 3072) is 432
/// tiles, three whole waves and 36 tiles: under [`Self::Waves`], the
/// default, the last 3 row tiles split K in 3 (108 workgroups beside
/// nothing, a third as long) in the same launch. Measured on the H100
/// (session 36): `linear2` 235 -> 269 TFLOP/s, a FLUX.1 step 0.355 ->
/// 0.345 s, prefill unchanged. Each split writes partial sums (at most one
/// wave of tiles' worth of scratch) that one more launch adds up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cm2Split {
    /// Split where the tiles fill at most half the multiprocessors.
    Auto,
    /// As [`Self::Auto`], and the tiles of a last wave that fill at most
    /// half of it (float and integer kernels).
    #[default]
    Waves,
    /// Never split.
    Off,
    /// This many splits wherever the kernel has a split variant (tools).
    Splits(u32),
}

/// K below which a GEMM is not split ([`Cm2Split::Auto`], [`Cm2Split::Waves`]): the partial
/// sums' extra launch outweighs the gain.
pub const SPLIT_MIN_K: u64 = 2048;

/// Splits at most ([`Cm2Split::Auto`], [`Cm2Split::Waves`]).
pub const SPLIT_MAX: u64 = 8;

impl Cm2Split {
    /// Whether a number of splits was asked for ([`Self::Splits`]), rather
    /// than a rule or none.
    pub fn counted(self) -> bool {
        matches!(self, Self::Splits(_))
    }
}

impl std::str::FromStr for Cm2Split {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "" | "waves" | "on" => Ok(Self::Waves),
            "off" | "0" | "1" => Ok(Self::Off),
            n => match n.parse::<u32>() {
                Ok(n) if n <= 64 => Ok(Self::Splits(n)),
                _ => Err(format!(
                    "split K `{n}`: want waves (the default), auto, off or a number of splits up to 64"
                )),
            },
        }
    }
}

/// Whether two or three f16 linears of one input (q/k/v, gate/up) past the
/// GEMVs share one SPIR-V GEMM launch (the embedder's choice; the CLI reads
/// `DYNVRAM_CM2_STACK`). Stacked, Llama-7B's q/k/v are 192 tiles of
/// 128 x 256 at 512 rows and gate/up 344, where each layer alone was 64
/// (split K) or 172 on 132 multiprocessors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Cm2Stack {
    /// One launch each.
    Off,
    /// Stacked where it pays (the default; its reference test passed on
    /// the H100 in session 33): where a layer alone is a small grid, or
    /// the stacked tiles fill the device's waves of multiprocessors better
    /// than the first layer's alone.
    #[default]
    Auto,
    /// Stacked wherever the kernel can (tests, comparisons).
    Always,
    /// As [`Self::Auto`], on the stacked kernel whose tiles go in groups of
    /// 8 row tiles (`gemm_cm2_f16_k32_fast_stack_g8`; tuning: not measured
    /// yet).
    Grouped,
}

impl std::str::FromStr for Cm2Stack {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "" | "auto" | "on" => Ok(Self::Auto),
            "always" => Ok(Self::Always),
            "grouped" => Ok(Self::Grouped),
            s => Err(format!(
                "stacked GEMMs `{s}`: want auto, off, always or grouped"
            )),
        }
    }
}

/// Devices for the choosers' unit tests.
#[cfg(test)]
pub(crate) mod test_caps {
    use super::*;

    /// A workgroup-scope shape of `types`, 16-granular, of `invocations`.
    pub(crate) fn workgroup(types: [i32; 4], invocations: u32) -> FlexibleDims {
        FlexibleDims {
            m_granularity: 16,
            n_granularity: 16,
            k_granularity: 16,
            types,
            scope: SCOPE_WORKGROUP,
            workgroup_invocations: invocations,
        }
    }

    /// f16 x f16 + f32 shapes of `invocations`.
    pub(crate) fn f32_sums(invocations: u32) -> FlexibleDims {
        workgroup(
            [COMPONENT_F16, COMPONENT_F16, COMPONENT_F32, COMPONENT_F32],
            invocations,
        )
    }

    /// f16 x f16 + f16 shapes of `invocations` (the f16 tiles kernels
    /// convert their results to).
    pub(crate) fn f16_sums(invocations: u32) -> FlexibleDims {
        workgroup([COMPONENT_F16; 4], invocations)
    }

    /// An H100-like device listing `flexible`: every feature, 48 KiB of
    /// shared memory with 16 KiB reserved, subgroups of 32.
    pub(crate) fn nvidia(flexible: Vec<FlexibleDims>) -> Cm2Caps {
        Cm2Caps {
            vulkan_1_3: true,
            workgroup_scope: true,
            flexible_dimensions: true,
            per_element_operations: true,
            tensor_addressing: true,
            conversions: true,
            reductions: true,
            max_workgroup_size: 1024,
            max_dimension: 256,
            reserved_shared_memory: 16 << 10,
            max_shared_memory: 48 << 10,
            subgroup_size: 32,
            sm_count: 132,
            flexible,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Cm2Bf16, Cm2Int4, SpirvGemm};

    #[test]
    fn every_gemm_by_default_float_ones_where_asked() {
        assert_eq!(SpirvGemm::default(), SpirvGemm::Auto);
        let allows = |s: SpirvGemm| (s.allows(false), s.allows(true));
        assert_eq!(allows(SpirvGemm::Float), (true, false));
        assert_eq!(allows(SpirvGemm::Auto), (true, true));
        assert_eq!(allows(SpirvGemm::Off), (false, false));
        for (text, want) in [
            ("auto", SpirvGemm::Auto),
            ("on", SpirvGemm::Auto),
            ("float", SpirvGemm::Float),
            ("off", SpirvGemm::Off),
            ("0", SpirvGemm::Off),
        ] {
            assert_eq!(text.parse::<SpirvGemm>(), Ok(want), "{text}");
        }
        let why = "int".parse::<SpirvGemm>().expect_err("unknown");
        assert!(why.contains("auto") && why.contains("float"), "{why}");
    }

    #[test]
    fn bf16_layers_take_the_bf16_kernels_unless_f16_is_asked() {
        assert_eq!(Cm2Bf16::default(), Cm2Bf16::Auto);
        for (text, want) in [
            ("auto", Cm2Bf16::Auto),
            ("staged", Cm2Bf16::Staged),
            ("bf16", Cm2Bf16::Staged),
            ("f16", Cm2Bf16::ViaF16),
            ("via-f16", Cm2Bf16::ViaF16),
            ("f16-resident", Cm2Bf16::ViaF16Resident),
        ] {
            assert_eq!(text.parse::<Cm2Bf16>(), Ok(want), "{text}");
            assert_eq!(want.via_f16(), want != Cm2Bf16::Staged, "{text}");
        }
        let why = "fp8".parse::<Cm2Bf16>().expect_err("unknown");
        assert!(why.contains("staged") && why.contains("f16"), "{why}");
    }

    #[test]
    fn int4_layers_take_the_int8_kernels_unless_staged_is_asked() {
        assert_eq!(Cm2Int4::default(), Cm2Int4::ViaInt8);
        for (text, want) in [
            ("staged", Cm2Int4::Staged),
            ("int4", Cm2Int4::Staged),
            ("int8", Cm2Int4::ViaInt8),
            ("via-int8", Cm2Int4::ViaInt8),
        ] {
            assert_eq!(text.parse::<Cm2Int4>(), Ok(want), "{text}");
        }
        let why = "fp8".parse::<Cm2Int4>().expect_err("unknown");
        assert!(why.contains("staged") && why.contains("int8"), "{why}");
    }
}
