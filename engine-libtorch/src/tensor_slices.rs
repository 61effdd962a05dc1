//! Contiguous float32 CPU tensors' memory as Rust slices, for the loops that run over it
//! in place of libtorch's elementwise ops (the DSP's and the int8 kernels').

use tch::{Device, Kind, Tensor};

/// The f32 data of a contiguous CPU float tensor.
pub fn f32s(t: &Tensor) -> &[f32] {
    assert!(t.kind() == Kind::Float && t.device() == Device::Cpu && t.is_contiguous(), "f32 CPU contiguous");
    let n = t.numel();
    if n == 0 {
        return &[];
    }
    // SAFETY: a contiguous float tensor of n elements; the slice borrows the tensor.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const f32, n) }
}

/// The f32 data of a contiguous CPU float tensor, mutable.
///
/// # Safety
///
/// No other tensor that shares `t`'s storage may be used (read or written, by libtorch or
/// through [`f32s`] or this function) while the slice lives: `&mut Tensor` keeps this handle
/// out, not the others, and libtorch tensors share storage freely (`shallow_clone`, views such
/// as `narrow` or `view`, `contiguous()` of a tensor that already is). The callers use it on
/// tensors made for the purpose (`Tensor::empty`, `zeros`, a `copy`) that they hold alone.
pub unsafe fn f32s_mut(t: &mut Tensor) -> &mut [f32] {
    assert!(t.kind() == Kind::Float && t.device() == Device::Cpu && t.is_contiguous(), "f32 CPU contiguous");
    let n = t.numel();
    if n == 0 {
        return &mut [];
    }
    // SAFETY: a contiguous float tensor of n elements, borrowed mutably for the slice's life;
    // no other handle to its storage is used meanwhile (the caller's promise).
    unsafe { std::slice::from_raw_parts_mut(t.data_ptr() as *mut f32, n) }
}
