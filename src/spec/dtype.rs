//! The dtypes the ops compute in, and the rule for mixing them: PyTorch's, which rejects an
//! input and a weight of different dtypes rather than cast one of them.

use burn::tensor::DType;

use super::error::{SpecError, SpecErrorKind as Kind, SpecResult};

/// Reject a float argument in a dtype the ops do not compute in (a quantized tensor, say):
/// they compute in f64, f32, f16 and bf16.
pub fn check_float_dtype(op: &'static str, dtype: DType) -> SpecResult<()> {
    match dtype {
        DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16 => Ok(()),
        dtype => Err(SpecError::new(
            op,
            Kind::Dtype {
                dtype: format!("{dtype:?}"),
            },
        )),
    }
}

/// Reject an argument whose dtype differs from the input's, as PyTorch does ("Input type and
/// weight type should be the same"): a silent cast would compute in a precision nobody chose.
pub fn check_same_dtype(
    op: &'static str,
    arg: &'static str,
    input: DType,
    actual: DType,
) -> SpecResult<()> {
    // Flex32 is f32 held in a flexible layout: the same numbers.
    let widen = |dtype| match dtype {
        DType::Flex32 => DType::F32,
        dtype => dtype,
    };
    if widen(input) == widen(actual) {
        return Ok(());
    }
    Err(SpecError::new(
        op,
        Kind::DtypeMismatch {
            arg,
            expected: format!("{input:?}"),
            actual: format!("{actual:?}"),
        },
    ))
}

/// Check that every flat index into an input plane of `plane` elements fits `dtype`, the
/// device's int dtype that pooling indices are written in: a narrower one must not wrap.
pub fn check_index_dtype(op: &'static str, plane: usize, dtype: DType) -> SpecResult<()> {
    let largest: u64 = match dtype {
        DType::I8 => i8::MAX as u64,
        DType::I16 => i16::MAX as u64,
        DType::I32 => i32::MAX as u64,
        DType::U8 => u8::MAX as u64,
        DType::U16 => u16::MAX as u64,
        DType::U32 => u32::MAX as u64,
        DType::I64 => i64::MAX as u64,
        _ => u64::MAX,
    };
    if plane > 0 && (plane - 1) as u64 > largest {
        return Err(SpecError::new(
            op,
            Kind::IndexDtype {
                plane,
                dtype: format!("{dtype:?}"),
            },
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_only_and_never_mixed() {
        assert!(check_float_dtype("conv2d", DType::BF16).is_ok());
        assert_eq!(
            check_float_dtype("conv2d", DType::I32)
                .unwrap_err()
                .to_string(),
            "conv2d: dtype I32 is not supported (the ops compute in F64, F32, F16 and BF16)"
        );
        assert!(check_same_dtype("conv2d", "weight", DType::F32, DType::F32).is_ok());
        assert_eq!(
            check_same_dtype("conv2d", "weight", DType::F32, DType::F64)
                .unwrap_err()
                .to_string(),
            "conv2d: weight has dtype F64 but the input has F32; cast one of them"
        );
    }

    #[test]
    fn indices_must_fit_the_index_dtype() {
        assert!(check_index_dtype("max_pool2d", 32_768, DType::I16).is_ok());
        let error = check_index_dtype("max_pool2d", 256 * 256, DType::I16).unwrap_err();
        assert_eq!(
            error.to_string(),
            "max_pool2d: indices into a plane of 65536 elements do not fit in the index dtype \
             I16; use a wider int dtype (PyTorch's indices are int64)"
        );
        assert!(check_index_dtype("max_pool3d", (1 << 31) + 1, DType::I32).is_err());
        assert!(check_index_dtype("max_pool3d", 1 << 31, DType::I32).is_ok());
        assert!(check_index_dtype("max_pool3d", 1 << 40, DType::I64).is_ok());
    }
}
