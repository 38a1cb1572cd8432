//! The [`Tracer`]: the graph under construction, shared by every [`Tensor`] it hands out.

use crate::error::{FrontendError, Result};
use crate::tensor::{IntoScalar, Tensor, Value};
use smelt_ir::graph::scalar_tensor;
use smelt_ir::{verify, DType, Graph, HostTensor, Op, Shape};
use std::cell::{Cell, RefCell};
use std::fmt;
use std::rc::Rc;

/// State shared by a tracer and its tensors.
#[derive(Default)]
pub(crate) struct State {
    graph: RefCell<Graph>,
    /// The first error recorded by an operator; [`Tracer::finish`] returns it.
    first_error: RefCell<Option<FrontendError>>,
    finished: Cell<bool>,
}

impl State {
    /// Records `e` unless an earlier error was recorded (first error wins).
    pub(crate) fn record(&self, e: FrontendError) {
        let mut slot = self.first_error.borrow_mut();
        if slot.is_none() {
            *slot = Some(e);
        }
    }
}

/// Adds node `op` to the graph of `state` (the IR infers and checks its type) and returns its
/// handle.
pub(crate) fn emit(state: &Rc<State>, op: Op) -> Result<Tensor> {
    if state.finished.get() {
        return Err(FrontendError::Finished { op: op.name() });
    }
    let mut graph = state.graph.borrow_mut();
    let id = graph.push(op)?;
    let ty = graph.ty(id).clone();
    Ok(Tensor::from_value(state.clone(), Value { id, ty }))
}

/// Records tensor operations into a [`Graph`].
///
/// A tracer is a cheap handle (an `Rc`); clones share one graph. Tensors created by a tracer
/// keep its state alive and add their operations to it. See the crate docs for the error
/// model.
#[derive(Clone, Default)]
pub struct Tracer {
    pub(crate) state: Rc<State>,
}

impl Tracer {
    pub fn new() -> Tracer {
        Tracer::default()
    }

    /// A graph input named `name`, supplied on every run.
    pub fn input(
        &self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<Tensor> {
        let (name, shape) = (name.into(), shape.into());
        emit(&self.state, Op::Input { name, dtype, shape })
    }

    /// A parameter (weight) named `name`.
    pub fn param(
        &self,
        name: impl Into<String>,
        dtype: DType,
        shape: impl Into<Shape>,
    ) -> Result<Tensor> {
        let (name, shape) = (name.into(), shape.into());
        emit(&self.state, Op::Param { name, dtype, shape })
    }

    /// A constant tensor.
    pub fn constant(&self, t: HostTensor) -> Result<Tensor> {
        emit(&self.state, Op::Constant(t))
    }

    /// A 0-d constant of `dtype` holding `value` (converted as by a cast).
    pub fn scalar(&self, value: impl IntoScalar, dtype: DType) -> Result<Tensor> {
        let value = value.into_scalar();
        emit(&self.state, Op::Constant(scalar_tensor(value, dtype)))
    }

    /// A tensor of `shape` filled with `value`: a 0-d constant expanded (no copy in the graph).
    pub fn full(&self, shape: &[usize], value: impl IntoScalar, dtype: DType) -> Result<Tensor> {
        self.scalar(value, dtype)?.broadcast_to(shape)
    }

    pub fn zeros(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.full(shape, 0i64, dtype)
    }

    pub fn ones(&self, shape: &[usize], dtype: DType) -> Result<Tensor> {
        self.full(shape, 1i64, dtype)
    }

    /// Names `t` as a graph output. A poisoned `t` or a tensor of another tracer is an error.
    pub fn output(&self, name: impl Into<String>, t: &Tensor) -> Result<()> {
        if !Rc::ptr_eq(&self.state, &t.state) {
            return Err(FrontendError::MixedTracers { op: "output" });
        }
        let v = t.value("output")?;
        if self.state.finished.get() {
            return Err(FrontendError::Finished { op: "output" });
        }
        self.state.graph.borrow_mut().set_output(name, v.id)?;
        Ok(())
    }

    /// The first error recorded by an operator, if any.
    pub fn error(&self) -> Option<FrontendError> {
        self.state.first_error.borrow().clone()
    }

    /// A copy of the graph traced so far (not verified).
    pub fn graph(&self) -> Graph {
        self.state.graph.borrow().clone()
    }

    /// Ends tracing: returns the first error an operator recorded, or else the graph, which
    /// is verified. Tensors of this tracer can no longer be used afterwards (their
    /// operations return [`FrontendError::Finished`]).
    pub fn finish(self) -> Result<Graph> {
        if let Some(e) = self.error() {
            return Err(e);
        }
        if self.state.finished.replace(true) {
            return Err(FrontendError::Finished { op: "finish" });
        }
        let graph = std::mem::take(&mut *self.state.graph.borrow_mut());
        verify(&graph).map_err(|e| FrontendError::Verify(Box::new(e)))?;
        Ok(graph)
    }

    /// Whether `self` and `t` share one graph.
    pub fn owns(&self, t: &Tensor) -> bool {
        Rc::ptr_eq(&self.state, &t.state)
    }
}

impl fmt::Debug for Tracer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tracer")
            .field("nodes", &self.state.graph.borrow().len())
            .field("error", &self.state.first_error.borrow())
            .field("finished", &self.state.finished.get())
            .finish()
    }
}
