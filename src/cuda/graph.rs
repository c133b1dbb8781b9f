//! CUDA graphs: capture any sequence of engine calls on the engine's stream and replay it.
//!
//! Capture runs in the driver's global mode, in which any call that could allocate or synchronize
//! fails: a capture that completes is itself evidence that the captured calls did neither.

use super::engine::CudaEngine;
use crate::error::{Error, Result};
use cudarc::driver::CudaGraph;
use cudarc::driver::sys;

/// A captured, instantiated graph.
pub struct Graph {
    inner: CudaGraph,
}

impl Graph {
    /// Replays the graph on the stream it was captured on.
    pub fn launch(&self) -> Result<()> {
        self.inner.launch()?;
        Ok(())
    }

    fn node_types(&self) -> Result<Vec<sys::CUgraphNodeType>> {
        let g = self.inner.cu_graph();
        let mut count = 0usize;
        // SAFETY: counting query, then a buffer of that many nodes.
        unsafe { sys::cuGraphGetNodes(g, std::ptr::null_mut(), &mut count) }.result()?;
        let mut nodes = vec![std::ptr::null_mut(); count];
        unsafe { sys::cuGraphGetNodes(g, nodes.as_mut_ptr(), &mut count) }.result()?;
        nodes
            .iter()
            .map(|&nd| {
                let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
                unsafe { sys::cuGraphNodeGetType(nd, &mut ty) }.result()?;
                Ok(ty)
            })
            .collect()
    }

    /// All nodes of the graph.
    pub fn nodes(&self) -> Result<usize> {
        Ok(self.node_types()?.len())
    }

    /// Kernel nodes (launches) of the graph, counted from the graph itself.
    pub fn kernel_nodes(&self) -> Result<usize> {
        Ok(self
            .node_types()?
            .into_iter()
            .filter(|t| *t == sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL)
            .count())
    }
}

impl CudaEngine {
    /// Captures everything `f` enqueues on the engine's stream into a graph. Capture always ends,
    /// also when `f` fails.
    pub fn capture(&self, f: impl FnOnce(&Self) -> Result<()>) -> Result<Graph> {
        self.dev
            .stream
            .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL)?;
        let r = f(self);
        let g = self
            .dev
            .stream
            .end_capture(sys::CUgraphInstantiate_flags(0));
        r?;
        let g = g?.ok_or_else(|| Error::Cuda("graph capture produced no graph".into()))?;
        g.upload()?;
        Ok(Graph { inner: g })
    }
}
