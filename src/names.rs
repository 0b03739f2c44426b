//! Names of closed sets of choices (protocols, paths, kernel families, ...): one macro gives an
//! enum its spellings, so parsing, printing and (de)serialisation agree and an unknown name is an
//! error that lists the choices.

/// `enum_names!(Type, "what it is", Type::A => ["a", "alias"], Type::B => ["b"])` gives `Type`:
/// `name()` (the first spelling), `NAMES` (the first spellings, in order), case-insensitive
/// `FromStr` that accepts every spelling (an unknown name is `Error::Unknown` listing the
/// choices), and `Display`. Prefix the type with `serde` to also (de)serialise through the names.
macro_rules! enum_names {
    (serde $t:ty, $what:literal, $( $v:path => [$($s:literal),+] ),+ $(,)?) => {
        $crate::names::enum_names!($t, $what, $( $v => [$($s),+] ),+);
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                $crate::names::by_name::deserialize(d)
            }
        }
    };
    ($t:ty, $what:literal, $( $v:path => [$($s:literal),+] ),+ $(,)?) => {
        impl $t {
            /// Every choice's name, in declaration order.
            const NAMES: &'static [&'static str] = &[$([$($s),+][0]),+];
            /// What a value of this type is, in words (for error messages).
            #[allow(dead_code)] // not every enum's errors need it
            const WHAT: &'static str = $what;
            pub(crate) fn name(self) -> &'static str {
                match self { $( $v => [$($s),+][0], )+ }
            }
            /// The choice `s` spells (any spelling, any case, surrounding blanks ignored), if
            /// any: `FromStr` without building the error (pricing asks per op).
            #[allow(dead_code)] // not every enum is looked up without its error
            pub(crate) fn from_name(s: &str) -> Option<Self> {
                // The exact spelling first (names written in code, looked up per op priced).
                $( if [$($s),+].contains(&s) { return Some($v); } )+
                let s = s.trim();
                $( if [$($s),+].iter().any(|n| n.eq_ignore_ascii_case(s)) { return Some($v); } )+
                None
            }
        }
        impl std::str::FromStr for $t {
            type Err = $crate::error::Error;
            fn from_str(s: &str) -> $crate::error::Result<Self> {
                if let Some(v) = Self::from_name(s) {
                    return Ok(v);
                }
                Err($crate::error::Error::Unknown {
                    kind: $what,
                    name: $crate::units::echo(s),
                    choices: Self::NAMES.iter().map(|n| n.to_string()).collect(),
                })
            }
        }
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}
pub(crate) use enum_names;

/// `#[serde(with = "crate::names::by_name")]` for a field whose type has names from
/// [`enum_names!`] but derives its own `Serialize` (the spec enums).
pub(crate) mod by_name {
    use std::fmt::Display;
    use std::str::FromStr;

    pub(crate) fn serialize<T: Display, S: serde::Serializer>(
        v: &T,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_str(v)
    }

    pub(crate) fn deserialize<'de, T, D>(d: D) -> Result<T, D::Error>
    where
        T: FromStr,
        T::Err: Display,
        D: serde::Deserializer<'de>,
    {
        let s = <String as serde::Deserialize>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Path3 {
        Nvlink,
        PcieP2p,
        Host,
    }
    super::enum_names!(serde Path3, "communication path",
        Path3::Nvlink => ["nvlink"], Path3::PcieP2p => ["pcie_p2p", "p2p"], Path3::Host => ["host"]);

    #[test]
    fn parses_aliases_and_lists_choices_when_unknown() {
        assert_eq!("P2P".parse::<Path3>().unwrap(), Path3::PcieP2p);
        assert_eq!(Path3::PcieP2p.to_string(), "pcie_p2p");
        let e = "nvlinc".parse::<Path3>().unwrap_err().to_string();
        assert!(
            e.contains("'nvlinc'") && e.contains("nvlink, pcie_p2p, host"),
            "{e}"
        );
        let long = "x".repeat(10_000);
        let e = long.parse::<Path3>().unwrap_err().to_string();
        assert!(e.len() < 300, "{e}");
    }

    #[test]
    fn serde_goes_through_the_names() {
        #[derive(serde::Deserialize, serde::Serialize)]
        struct T {
            p: Path3,
        }
        let t: T = toml::from_str("p = \"host\"").unwrap();
        assert_eq!(t.p, Path3::Host);
        assert_eq!(toml::to_string(&t).unwrap().trim(), "p = \"host\"");
        let e = toml::from_str::<T>("p = \"pci\"")
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("unknown communication path 'pci'"), "{e}");
    }
}
