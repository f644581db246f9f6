//! Enums whose every variant has one spelling (a metric label or a config value),
//! declared once: the variant and its spelling on one line.

/// Declares a fieldless enum and, from its lines `Variant = "spelling"`: `ALL` (every
/// variant, in declaration order), `NAMES` (their spellings, same order) and the
/// spelling accessor named after `fn`.
macro_rules! spelled {
    (
        fn $accessor:ident;
        $(#[$meta:meta])*
        $vis:vis enum $ty:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $name:literal, )*
        }
    ) => {
        $(#[$meta])*
        $vis enum $ty {
            $( $(#[$vmeta])* $variant, )*
        }

        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: [$ty; [$($name),*].len()] = [$($ty::$variant),*];
            /// The spellings, in the order of [`Self::ALL`].
            pub const NAMES: [&'static str; [$($name),*].len()] = [$($name),*];

            /// The spelling.
            pub fn $accessor(self) -> &'static str {
                Self::NAMES[self as usize]
            }
        }
    };
}

pub(crate) use spelled;
