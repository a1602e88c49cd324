//! The crate's switches and settings from environment variables, each read once by its user.

/// Reads a switch: unset or anything but `0`/`off`/`false` means on.
pub(crate) fn switch_on(var: &str) -> bool {
    !matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("0") | Ok("off") | Ok("false") | Ok("OFF") | Ok("FALSE")
    )
}

/// Reads a number; None when unset or not a number.
pub(crate) fn number<T: std::str::FromStr>(var: &str) -> Option<T> {
    std::env::var(var).ok().and_then(|v| v.trim().parse().ok())
}

/// Reads a flag that is off unless set to `1`/`on`/`true`/`yes`.
pub(crate) fn flag_on(var: &str) -> bool {
    matches!(
        std::env::var(var).as_deref().map(str::trim),
        Ok("1") | Ok("on") | Ok("true") | Ok("yes") | Ok("ON") | Ok("TRUE") | Ok("YES")
    )
}
