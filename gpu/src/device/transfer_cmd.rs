//! A copy for the copy queue (all platforms).

/// One buffer-to-buffer copy of a batch.
#[derive(Debug, Clone)]
pub struct CopyCmd {
    /// Source (a registered pin).
    pub src: wgpu::Buffer,
    /// Source offset.
    pub src_offset: u64,
    /// Destination (an arena).
    pub dst: wgpu::Buffer,
    /// Destination offset.
    pub dst_offset: u64,
    /// Bytes (a multiple of 4).
    pub size: u64,
}
