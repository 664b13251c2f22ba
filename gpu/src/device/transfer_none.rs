//! No copy queue where wgpu has no Vulkan backend: passes copy on wgpu's
//! queue. Same surface as `transfer.rs`, never constructed.

use super::GpuError;

pub use super::transfer_cmd::CopyCmd;

/// Never constructed on this platform.
#[derive(Debug)]
pub enum TransferQueue {}

impl TransferQueue {
    /// Whether the copies share wgpu's queue.
    pub fn shared_with_wgpu(&self) -> bool {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn cross_family(&self) -> bool {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn create_buffer(
        &self,
        _: &wgpu::Device,
        _: &str,
        _: u64,
        _: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer, GpuError> {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn submit(&self, _: Vec<CopyCmd>, _: u64) -> Result<u64, GpuError> {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn kernels_wait_for(&self, _: &wgpu::Queue, _: u64) {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn signal_kernels(&self, _: &wgpu::Queue) -> u64 {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn progress(&self) -> Result<(u64, u64), GpuError> {
        match *self {}
    }

    /// See the Vulkan version.
    pub fn wait_all(&self) -> Result<(), GpuError> {
        match *self {}
    }
}
