//! What a valid vector is.
//!
//! The SQL layer turns `real[]` (or pgvector's `vector`) into a `&[f32]` and asks this module
//! whether navis can use it. Keeping the rules here means the operators, index build and
//! inserts all reject the same inputs with the same wording.

use std::fmt;

/// Largest number of dimensions navis accepts, in the SQL operators and in indexes.
/// Equal to pgvector's `VECTOR_MAX_DIM`, so every pgvector `vector` fits; pgvector's own
/// indexes stop at 2,000.
pub const MAX_DIM: usize = 16_000;

/// Why a vector cannot be used.
#[derive(Clone, Debug, PartialEq)]
pub enum VectorError {
    Empty,
    TooManyDimensions { dim: usize },
    NotFinite { index: usize, value: f32 },
    DimensionMismatch { left: usize, right: usize },
}

impl fmt::Display for VectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VectorError::Empty => write!(f, "vector must have at least 1 dimension"),
            VectorError::TooManyDimensions { dim } => {
                write!(
                    f,
                    "vector has {dim} dimensions; navis supports at most {MAX_DIM}"
                )
            }
            VectorError::NotFinite { index, value } => write!(
                f,
                "vector element {} is {}; NaN and infinity are not allowed",
                index + 1,
                sql_spelling(*value)
            ),
            VectorError::DimensionMismatch { left, right } => {
                write!(f, "different vector dimensions {left} and {right}")
            }
        }
    }
}

impl std::error::Error for VectorError {}

/// How PostgreSQL prints a non-finite float, so messages match what users typed.
fn sql_spelling(value: f32) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value == f32::INFINITY {
        "Infinity".into()
    } else if value == f32::NEG_INFINITY {
        "-Infinity".into()
    } else {
        value.to_string()
    }
}

/// Checks one vector: non-empty, at most [`MAX_DIM`] elements, every element finite.
pub fn validate(v: &[f32]) -> Result<(), VectorError> {
    if v.is_empty() {
        return Err(VectorError::Empty);
    }
    if v.len() > MAX_DIM {
        return Err(VectorError::TooManyDimensions { dim: v.len() });
    }
    // A single pass that is cheap to vectorise; the position is only looked up on failure.
    if v.iter().all(|x| x.is_finite()) {
        return Ok(());
    }
    let index = v.iter().position(|x| !x.is_finite()).unwrap_or(0);
    Err(VectorError::NotFinite {
        index,
        value: v[index],
    })
}

/// Checks two operands of a distance operator.
pub fn validate_pair(a: &[f32], b: &[f32]) -> Result<(), VectorError> {
    validate(a)?;
    validate(b)?;
    if a.len() != b.len() {
        return Err(VectorError::DimensionMismatch {
            left: a.len(),
            right: b.len(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_vectors() {
        assert_eq!(validate(&[1.0, -2.5, 0.0]), Ok(()));
        assert_eq!(validate(&vec![0.5; MAX_DIM]), Ok(()));
        assert_eq!(validate(&[f32::MAX, f32::MIN]), Ok(()));
    }

    #[test]
    fn rejects_each_bad_input() {
        assert_eq!(validate(&[]), Err(VectorError::Empty));
        assert_eq!(
            validate(&vec![0.0; MAX_DIM + 1]),
            Err(VectorError::TooManyDimensions { dim: MAX_DIM + 1 })
        );
        assert!(matches!(
            validate(&[1.0, f32::NAN]),
            Err(VectorError::NotFinite { index: 1, .. })
        ));
        assert_eq!(
            validate(&[f32::INFINITY]),
            Err(VectorError::NotFinite {
                index: 0,
                value: f32::INFINITY
            })
        );
        assert_eq!(
            validate_pair(&[1.0], &[1.0, 2.0]),
            Err(VectorError::DimensionMismatch { left: 1, right: 2 })
        );
    }

    #[test]
    fn messages_name_the_problem() {
        let e = validate(&[1.0, 2.0, f32::NEG_INFINITY])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "vector element 3 is -Infinity; NaN and infinity are not allowed"
        );
        let e = validate_pair(&[1.0], &[1.0, 2.0]).unwrap_err().to_string();
        assert_eq!(e, "different vector dimensions 1 and 2");
    }
}
