//! Every integration test, as modules of one binary: Burn, CubeCL and wgpu are linked once
//! instead of once per file. Run one family with `cargo test --test suite <module>::`, e.g.
//! `cargo test --test suite conv_errors::`.

mod common;
mod conv_bn_act;
mod conv_errors;
mod conv_gradcheck;
mod cpu_algorithms;
#[cfg(any(feature = "wgpu", feature = "vulkan", feature = "cuda"))]
mod cube_cross;
mod dtypes;
mod epilogue;
mod fuse;
mod fuzz;
mod golden;
mod long_sums;
mod nn;
mod pool_errors;
mod pool_gradcheck;
mod port_pytorch;
mod resnet_train;
