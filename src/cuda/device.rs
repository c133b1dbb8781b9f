//! The GPU: probing it without panicking, the context and stream, the compiled modules, and a
//! small typed device buffer.

use super::kernels;
use super::nvrtc;
use crate::error::{Error, Result};
use cudarc::driver::sys::{self, CUdeviceptr, CUstream};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DriverError, result};
use std::collections::HashMap;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

impl From<DriverError> for Error {
    fn from(e: DriverError) -> Self {
        Error::Cuda(format!("{e:?}"))
    }
}

/// (kernel, cluster size, block size, dynamic shared memory).
type ClusterKey = (&'static str, u32, u32, u32);

/// What a GPU is.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DeviceInfo {
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Device ordinal.
    pub ordinal: usize,
    /// Compute capability.
    pub cc: (i32, i32),
    /// NVRTC architecture (`sm_90`).
    pub arch: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache bytes.
    pub l2_bytes: u32,
    /// Largest opt-in shared memory per block.
    pub max_smem_optin: u32,
    /// Driver API version (e.g. 13000).
    pub driver_version: i32,
    /// Device memory in bytes.
    pub total_mem: usize,
}

/// Finds the GPU at `ordinal` (or returns why there is none). Never panics: the CUDA driver
/// library is looked up before any call into it.
pub fn probe(ordinal: usize) -> Result<DeviceInfo> {
    // SAFETY: only tries to dlopen libcuda.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoGpu(
            "the CUDA driver library (libcuda.so) is not installed".into(),
        ));
    }
    result::init().map_err(|e| Error::NoGpu(format!("cuInit failed: {e:?}")))?;
    let count = result::device::get_count().map_err(|e| Error::NoGpu(format!("{e:?}")))?;
    if count <= ordinal as i32 {
        return Err(Error::NoGpu(format!(
            "device {ordinal} requested, {count} CUDA device(s) present"
        )));
    }
    let dev = result::device::get(ordinal as i32)?;
    let attr = |a| unsafe { result::device::get_attribute(dev, a) };
    use sys::CUdevice_attribute_enum as A;
    let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
    let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
    let mut driver_version = 0;
    // SAFETY: out-parameter.
    unsafe { sys::cuDriverGetVersion(&mut driver_version) }.result()?;
    Ok(DeviceInfo {
        name: result::device::get_name(dev)?,
        ordinal,
        cc: (major, minor),
        arch: format!("sm_{major}{minor}"),
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u32,
        max_smem_optin: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32,
        driver_version,
        total_mem: unsafe { result::device::total_mem(dev) }?,
    })
}

/// The context, a stream of our own (capturable: never the legacy default stream), and every
/// kernel, loaded.
pub struct Device {
    pub(crate) ctx: Arc<CudaContext>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) info: DeviceInfo,
    funcs: HashMap<&'static str, CudaFunction>,
    /// The dynamic shared memory limit set at load, per kernel that stages in shared memory.
    dyn_smem: HashMap<&'static str, u32>,
    /// Occupancy answers, per (kernel, block size, dynamic shared memory): the seam's plan asks
    /// on every call, and the answer never changes.
    occupancy: std::cell::RefCell<HashMap<(&'static str, u32, u32), u32>>,
    /// Active-cluster answers, per (kernel, cluster size, block size, dynamic shared memory).
    clusters: std::cell::RefCell<HashMap<ClusterKey, u32>>,
    _modules: Vec<Arc<CudaModule>>,
    /// How many modules came from the disk cache (0 on a cold start).
    pub(crate) cached_modules: usize,
}

impl Device {
    /// Opens the GPU and compiles (or loads from the cache) every kernel module, with the
    /// given preprocessor macros defined.
    pub fn open(ordinal: usize, defines: &[&str]) -> Result<Self> {
        let info = probe(ordinal)?;
        let ctx = CudaContext::new(ordinal)?;
        // We order everything on our own stream; cudarc's per-buffer events would add nodes to
        // captured graphs and host work to every launch.
        // SAFETY: no cudarc buffer is shared across streams by this crate.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream()?;
        let mut funcs = HashMap::new();
        let mut modules = Vec::new();
        let mut cached = 0;
        for m in kernels::ALL {
            let c = nvrtc::compile_with(&m, &info.arch, defines)?;
            cached += c.cached as usize;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(c.cubin))
                .map_err(|e| Error::Cuda(format!("loading module `{}`: {e:?}", m.name)))?;
            for f in m.entry_points() {
                let func = module
                    .load_function(f)
                    .map_err(|e| Error::Cuda(format!("loading kernel `{f}`: {e:?}")))?;
                funcs.insert(f, func);
            }
            modules.push(module);
        }
        let mut dev = Device {
            ctx,
            stream,
            info,
            funcs,
            dyn_smem: HashMap::new(),
            occupancy: Default::default(),
            clusters: Default::default(),
            _modules: modules,
            cached_modules: cached,
        };
        // The fused kernels and the projection stage weights in dynamic shared memory beyond the
        // 48 KB default; the dynamic limit plus the kernel's static shared memory must stay within
        // the opt-in limit.
        for f in kernels::SEAM
            .entry_points()
            .chain(kernels::PROJECTION.entry_points())
        {
            let func = dev.func(f)?;
            let stat = func
                .get_attribute(sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)
                .map_err(|e| Error::Cuda(format!("static shared memory of `{f}`: {e:?}")))?;
            let dynamic = dev.info.max_smem_optin as i32 - stat;
            // SAFETY: valid function handle, value within the device limit.
            unsafe {
                sys::cuFuncSetAttribute(
                    func.cu_function(),
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    dynamic,
                )
            }
            .result()
            .map_err(|e| {
                Error::Cuda(format!(
                    "dynamic shared memory limit {dynamic} of `{f}`: {e:?}"
                ))
            })?;
            dev.dyn_smem.insert(f, dynamic as u32);
        }
        // The cluster kernels run clusters of up to 16 blocks (beyond the portable 8).
        for f in kernels::ALL.iter().flat_map(|m| m.clusters) {
            let func = dev.func(f)?;
            // SAFETY: valid function handle.
            unsafe {
                sys::cuFuncSetAttribute(
                    func.cu_function(),
                    sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
                    1,
                )
            }
            .result()
            .map_err(|e| Error::Cuda(format!("non-portable cluster size of `{f}`: {e:?}")))?;
        }
        Ok(dev)
    }

    /// A loaded kernel.
    pub fn func(&self, name: &str) -> Result<&CudaFunction> {
        self.funcs
            .get(name)
            .ok_or_else(|| Error::Cuda(format!("kernel `{name}` is not loaded")))
    }

    /// The dynamic shared memory a launch of `name` may use (the limit set at load; no driver
    /// call).
    pub fn max_dynamic_smem(&self, name: &str) -> Result<u32> {
        self.dyn_smem.get(name).copied().ok_or_else(|| {
            Error::Cuda(format!(
                "kernel `{name}` has no dynamic shared memory limit set"
            ))
        })
    }

    /// The engine's own stream.
    pub fn stream(&self) -> CUstream {
        self.stream.cu_stream()
    }

    /// Launches `name` with raw parameter pointers. With `pdl`, the launch carries the
    /// programmatic-stream-serialization attribute: the kernel may start before the previous
    /// kernel of the stream has finished, so it must be one that calls `pdl_wait()` before
    /// touching activations (kernels/common.cuh).
    ///
    /// # Safety
    /// `params` must point to values whose types match the kernel's parameters, and every device
    /// pointer among them must be valid for what the kernel reads and writes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        stream: CUstream,
        params: &mut [*mut c_void],
        pdl: bool,
    ) -> Result<()> {
        unsafe { self.launch_cluster(name, grid, block, smem, stream, params, pdl, 0) }
    }

    /// `launch`, where `cluster` > 1 groups the blocks along x into thread-block clusters of that
    /// many (grid.0 must be a multiple of it; sizes above 8 need a kernel loaded with the
    /// non-portable size allowed: `KernelModule::clusters`).
    ///
    /// # Safety
    /// As `launch`.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn launch_cluster(
        &self,
        name: &str,
        grid: (u32, u32, u32),
        block: u32,
        smem: u32,
        stream: CUstream,
        params: &mut [*mut c_void],
        pdl: bool,
        cluster: u32,
    ) -> Result<()> {
        let f = self.func(name)?;
        let err = |e: DriverError| {
            Error::Cuda(format!(
                "launch of `{name}` (grid {grid:?}, block {block}, smem {smem}, pdl {pdl}, cluster {cluster}): {e:?}"
            ))
        };
        if !pdl && cluster <= 1 {
            return unsafe {
                result::launch_kernel(f.cu_function(), grid, (block, 1, 1), smem, stream, params)
            }
            .map_err(err);
        }
        let mut attrs = launch_attrs(pdl, cluster);
        let cfg = launch_config(grid, block, smem, stream, &mut attrs);
        // SAFETY: cfg and attrs outlive the call; params as the caller guarantees.
        unsafe {
            sys::cuLaunchKernelEx(
                &cfg,
                f.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
        .map_err(err)
    }

    /// How many clusters of `cluster` blocks of `name` (`block` threads, `smem` bytes of dynamic
    /// shared memory) the device can run at once (0: none, the launch would fail). Cached.
    pub fn max_active_clusters(
        &self,
        name: &str,
        cluster: u32,
        block: u32,
        smem: u32,
    ) -> Result<u32> {
        let (&key, f) = self
            .funcs
            .get_key_value(name)
            .ok_or_else(|| Error::Cuda(format!("kernel `{name}` is not loaded")))?;
        let ckey = (key, cluster, block, smem);
        if let Some(&n) = self.clusters.borrow().get(&ckey) {
            return Ok(n);
        }
        let mut attrs = launch_attrs(false, cluster);
        let cfg = launch_config(
            (cluster, 1, 1),
            block,
            smem,
            std::ptr::null_mut(),
            &mut attrs,
        );
        let mut n = 0;
        // SAFETY: out-parameter, valid function, cfg and attrs outlive the call.
        let r = unsafe { sys::cuOccupancyMaxActiveClusters(&mut n, f.cu_function(), &cfg) };
        // A configuration the device cannot run at all is an answer (0), not an error.
        let n = if r == sys::CUresult::CUDA_SUCCESS {
            n.max(0) as u32
        } else {
            0
        };
        self.clusters.borrow_mut().insert(ckey, n);
        Ok(n)
    }

    /// Blocks until the stream has finished (and surfaces asynchronous kernel faults).
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize()?;
        Ok(())
    }

    /// Whether `stream` is being captured into a graph (then nothing may be allocated).
    pub fn is_capturing(stream: CUstream) -> Result<bool> {
        let mut st = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
        // SAFETY: out-parameter; the stream handle comes from the caller.
        unsafe { sys::cuStreamIsCapturing(stream, &mut st) }.result()?;
        Ok(st != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Blocks of `func` that fit on one multiprocessor (asked of the driver once per shape).
    pub fn occupancy(&self, name: &str, block: u32, smem: u32) -> Result<u32> {
        let (&key, f) = self
            .funcs
            .get_key_value(name)
            .ok_or_else(|| Error::Cuda(format!("kernel `{name}` is not loaded")))?;
        if let Some(&n) = self.occupancy.borrow().get(&(key, block, smem)) {
            return Ok(n);
        }
        let mut n = 0;
        // SAFETY: out-parameter, valid function.
        unsafe {
            sys::cuOccupancyMaxActiveBlocksPerMultiprocessor(
                &mut n,
                f.cu_function(),
                block as i32,
                smem as usize,
            )
        }
        .result()?;
        let n = n.max(0) as u32;
        self.occupancy.borrow_mut().insert((key, block, smem), n);
        Ok(n)
    }
}

/// The launch attributes of `Device::launch_cluster`: programmatic stream serialization and the
/// cluster dimension, as asked; unused entries are ignored (the config counts the used ones).
fn launch_attrs(pdl: bool, cluster: u32) -> ([sys::CUlaunchAttribute; 2], u32) {
    // SAFETY: a zeroed attribute value is valid plain data; the field set is the one the id names.
    let mut a: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
    let mut n = 0;
    if pdl {
        a[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        a[n].value.programmaticStreamSerializationAllowed = 1;
        n += 1;
    }
    if cluster > 1 {
        a[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        a[n].value.clusterDim.x = cluster;
        a[n].value.clusterDim.y = 1;
        a[n].value.clusterDim.z = 1;
        n += 1;
    }
    (a, n as u32)
}

fn launch_config(
    grid: (u32, u32, u32),
    block: u32,
    smem: u32,
    stream: CUstream,
    attrs: &mut ([sys::CUlaunchAttribute; 2], u32),
) -> sys::CUlaunchConfig {
    sys::CUlaunchConfig {
        gridDimX: grid.0,
        gridDimY: grid.1,
        gridDimZ: grid.2,
        blockDimX: block,
        blockDimY: 1,
        blockDimZ: 1,
        sharedMemBytes: smem,
        hStream: stream,
        attrs: attrs.0.as_mut_ptr(),
        numAttrs: attrs.1,
    }
}

/// Plain-old-data element types that device buffers hold.
pub trait Elem: bytemuck::Pod + Default {}
impl<T: bytemuck::Pod + Default> Elem for T {}

/// A device allocation of `len` elements of `T`, freed on drop. Allocation, fills and copies are
/// synchronous with the whole device (they end with a context synchronization): the engine's
/// stream is non-blocking, so a legacy-stream memset or pageable copy still in flight could
/// otherwise race with the next kernel. They must not happen during a graph capture (the engine
/// never does that).
pub struct DeviceBuffer<T: Elem> {
    ptr: CUdeviceptr,
    len: usize,
    ctx: Arc<CudaContext>,
    _t: PhantomData<T>,
}

impl<T: Elem> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] @ {:#x}",
            std::any::type_name::<T>(),
            self.len,
            self.ptr
        )
    }
}

impl<T: Elem> DeviceBuffer<T> {
    /// `len` zeroed elements.
    pub fn zeros(ctx: &Arc<CudaContext>, len: usize) -> Result<Self> {
        ctx.bind_to_thread()?;
        let bytes = (len * size_of::<T>()).max(16);
        // SAFETY: plain allocation; freed in Drop.
        let ptr = unsafe { result::malloc_sync(bytes) }?;
        unsafe { result::memset_d8_sync(ptr, 0, bytes) }?;
        ctx.synchronize()?;
        Ok(DeviceBuffer {
            ptr,
            len,
            ctx: ctx.clone(),
            _t: PhantomData,
        })
    }

    /// A copy of host data.
    pub fn from_host(ctx: &Arc<CudaContext>, data: &[T]) -> Result<Self> {
        let b = Self::zeros(ctx, data.len())?;
        if !data.is_empty() {
            // SAFETY: the allocation holds data.len() elements.
            unsafe { result::memcpy_htod_sync(b.ptr, data) }?;
            ctx.synchronize()?;
        }
        Ok(b)
    }

    /// Copies the buffer back to the host (waits for the device first).
    pub fn to_host(&self) -> Result<Vec<T>> {
        self.ctx.bind_to_thread()?;
        self.ctx.synchronize()?;
        let mut v = vec![T::default(); self.len];
        if self.len > 0 {
            // SAFETY: both sides hold len elements.
            unsafe { result::memcpy_dtoh_sync(&mut v, self.ptr) }?;
        }
        Ok(v)
    }

    /// Overwrites the buffer with host data of the same length.
    pub fn write(&mut self, data: &[T]) -> Result<()> {
        Error::check_len("buffer", &[self.len], data.len())?;
        self.ctx.bind_to_thread()?;
        if !data.is_empty() {
            // SAFETY: same length.
            unsafe { result::memcpy_htod_sync(self.ptr, data) }?;
            self.ctx.synchronize()?;
        }
        Ok(())
    }

    /// Fills every 16- or 32-bit word with `bits` (NaN poisoning before a check).
    pub fn poison(&mut self) -> Result<()> {
        self.ctx.bind_to_thread()?;
        let bytes = self.len * size_of::<T>();
        // SAFETY: within the allocation.
        unsafe {
            match size_of::<T>() {
                2 => sys::cuMemsetD16_v2(self.ptr, 0x7fc0, bytes / 2).result()?,
                4 => sys::cuMemsetD32_v2(self.ptr, 0x7fc0_0000, bytes / 4).result()?,
                _ => sys::cuMemsetD8_v2(self.ptr, 0xff, bytes).result()?,
            }
        }
        self.ctx.synchronize()?;
        Ok(())
    }

    /// The raw device pointer (for the raw API).
    pub fn ptr(&self) -> CUdeviceptr {
        self.ptr
    }

    /// Elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Elem> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: allocated by malloc_sync, freed once. Errors on teardown have nowhere to go.
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}
