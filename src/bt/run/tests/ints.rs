//! Integer typing, casts, overflow and operators, against what bpftrace 0.17 printed for the same BEGIN
//! programs on this machine.
use super::begin;

/// Check that unsigned division, modulo and right shift apply whatever the signs, and a zero divisor gives 0.
#[test]
fn division_modulo_shift() {
    assert_eq!(
        begin(
            r#"BEGIN { $a = 10; $b = 0; printf("%d\n", $a % $b); printf("%d\n", $a / $b); $c = -7; printf("%d %d %d %d\n", $c / 2, $c % 2, $c >> 1, -7 / 2); exit(); }"#
        ),
        "0\n0\n-4 1 -4 -4\n\n\n"
    );
    assert_eq!(
        begin(
            r#"BEGIN { $c = -7; printf("%lld %lld %lld %lld %lld\n", $c / 2, $c % 2, $c >> 1, -7 / 2, $c << 2); $u = (uint64)-7; printf("%lld %lld\n", $u >> 1, (int32)-7 >> 1); exit(); }"#
        ),
        "9223372036854775804 1 9223372036854775804 9223372036854775804 -28\n\
         9223372036854775804 9223372036854775804\n\n\n"
    );
}

/// Check that small types widen to 64 bits in arithmetic, and printf's `%d` shows the low 32 bits.
#[test]
fn widening_and_printf_lengths() {
    assert_eq!(
        begin(
            r#"BEGIN { $c = (int8)-7; $d = (uint8)200; printf("%d %d %d %d\n", $c / 2, $c + $d, $d * 2, $c * 2); exit(); }"#
        ),
        "-4 193 400 -14\n\n\n"
    );
    assert_eq!(
        begin(
            r#"BEGIN { $c = (uint32)4000000000; $d = (int32)-5; printf("%d %u %lld %llu\n", $c, $c, $c + 1, $d); print($c); print($d); print($c + $d); exit(); }"#
        ),
        "-294967296 4000000000 4000000001 18446744073709551611\n4000000000\n-5\n3999999995\n\n\n"
    );
}

/// Check that a result is unsigned when either operand is, and so is a comparison.
#[test]
fn signedness_of_results_and_comparisons() {
    assert_eq!(
        begin(
            r#"BEGIN { $a = -1; $b = (uint32)5; if ($a < $b) { printf("lt\n") } else { printf("ge\n") } exit(); }"#
        ),
        "ge\n\n\n"
    );
    let out = begin(
        r#"BEGIN { print((uint64)1 - 2); print(-1 * (uint32)1); print((uint32)1 - (uint32)2); $x = (uint8)250; $x += 10; print($x); $x = 1000; print($x); $y = 5; $y = (uint8)300; print($y); @m = (uint8)5; @m = -1; print(@m); @m2 = -1; @m2 = (uint64)18446744073709551615; print(@m2); print((int8)200 < 5); print(1 == (uint8)1); exit(); }"#,
    );
    let max = "18446744073709551615";
    assert_eq!(
        out,
        format!(
            "{max}\n{max}\n{max}\n250\n250\n44\n@m: {max}\n@m2: -1\n1\n1\n\n\n@m: {max}\n@m2: -1\n"
        )
    );
}

/// Check bpftrace's stores into a variable of another width: a narrower value overwrites the low bytes, a
/// wider one is dropped; `++` works in place.
#[test]
fn variable_stores_of_other_widths() {
    assert_eq!(
        begin(
            r#"BEGIN { $x = (uint8)250; $x = (uint8)7; print($x); $y = (uint32)5; $y = 7; print($y); $z = (uint8)250; $z++; print($z); $w = (int16)5; $w = $w + 1; print($w); $v = (uint8)1; $v = (uint16)2; print($v); exit(); }"#
        ),
        "7\n5\n251\n5\n1\n\n\n"
    );
    assert_eq!(
        begin(
            r#"BEGIN { $y = -1; $y = (uint8)255; print($y); $a = 5; $a = (int8)-1; print($a); $b = (uint64)5; $b = (int8)-1; print($b); $c = (uint32)1; $c = (int16)-2; print($c); exit(); }"#
        ),
        "-1\n255\n255\n65534\n\n\n"
    );
}

/// Check compound assignments and ++/-- on variables and maps, evaluated left to right.
#[test]
fn compound_and_steps() {
    assert_eq!(
        begin(
            r#"BEGIN { $x = 5; $x += 3; $x++; ++$x; printf("%d %d %d\n", $x, $x--, --$x); @m = 1; @m += 2; @m++; @n[1]++; @n[1] += 5; printf("%d %d\n", @m++, @m); exit(); }"#
        ),
        "10 10 8\n4 5\n\n\n@m: 5\n@n[1]: 6\n"
    );
}

/// Check `!`, `~`, unary minus (keeping the operand's type), ternaries and logical operators.
#[test]
fn unary_ternary_logical() {
    assert_eq!(
        begin(
            r#"BEGIN { printf("%d %d %d %d %d %d\n", !5, !0, ~5, -(5), 3 ? 4 : 5, 0 ? 4 : 5); $x = 1 && 0; $y = 0 || 7; print($x); print($y); print(!(uint8)0); print(~(uint8)5); print(-(uint8)5); exit(); }"#
        ),
        "0 1 -6 -5 4 5\n0\n1\n1\n250\n251\n\n\n"
    );
}

/// Check map values keep the sign of their first value at 64 bits, and integer keys print signed.
#[test]
fn map_value_types() {
    assert_eq!(
        begin(
            r#"BEGIN { @a = (int32)-5; @b = (uint8)255; @c = (uint32)4000000000; @d = -1; @e = (uint64)-1; @f[(uint8)3, (int8)-1] = 1; exit(); }"#
        ),
        "\n\n@a: -5\n@b: 255\n@c: 4000000000\n@d: -1\n@e: 18446744073709551615\n@f[3, -1]: 1\n"
    );
}

/// Check sums of unsigned values, max of a value bpftrace stores as negative (an empty map), print of a map
/// never assigned, an absent key read as 0, comparisons of mixed widths, a ternary of uint8.
#[test]
fn unsigned_aggregations_and_absent_values() {
    assert_eq!(
        begin(
            r#"BEGIN { @s = sum((uint64)-1); @t = sum((uint32)4000000000); @t = sum((uint32)4000000000); @mx = max((uint64)-1); @mn = min((uint8)200); if (0) { @x = 1; } print(@x); $v = @t2[5]; print($v); @t2[1] = (int8)-3; printf("%d %d %d\n", (int8)-1 == 255, (uint8)255 == 255, (int8)-1 == -1); $q = 1 ? (uint8)200 : 5; print($q); exit(); }"#
        ),
        "\n0\n0 1 1\n200\n\n\n@mn: 200\n\n@s: 18446744073709551615\n@t: 8000000000\n@t2[1]: -3\n\n"
    );
}

/// Check string keys with a compound assignment, string and tuple map values, `.N` of a map's tuple.
#[test]
fn string_keys_and_values() {
    assert_eq!(
        begin(
            r#"BEGIN { @a["x"] = 1; @a["y"] = 2; @a["x"] += 10; @b = "str"; @c = (1, "a"); $z = @c.1; print($z); print(@b); exit(); }"#
        ),
        "a\n@b: str\n\n\n@a[y]: 2\n@a[x]: 11\n@b: str\n@c: (1, a)\n"
    );
}

/// Check that `@m[k] op= v` evaluates its key twice (read, then store) and `@m[k]++` once, as bpftrace 0.17.
#[test]
fn key_evaluation_of_compound_and_step() {
    assert_eq!(
        begin(r#"BEGIN { $i = 0; @[$i++] += 5; @[$i++]++; print($i); exit(); }"#),
        "3\n\n\n@[2]: 1\n@[1]: 5\n"
    );
}
