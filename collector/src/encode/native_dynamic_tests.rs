//! Unit tests of the flattened `Dynamic` writer and of the typed columns inside it.

use super::*;
use crate::wire::put_str;

/// A value in the binary `Dynamic` encoding: `t` (the type), then `value`.
fn dynamic(t: &[u8], value: &[u8]) -> Vec<u8> {
    [t, value].concat()
}

fn push(c: &mut DynamicColumn, t: &[u8], value: &[u8]) {
    let body = dynamic(t, value);
    let mut r = &body[..];
    c.push_value(&mut r).unwrap();
    assert!(r.is_empty(), "the whole value is read");
}

fn written(c: &DynamicColumn, rows: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut prefix, mut data) = (Vec::new(), Vec::new());
    c.write_prefix(&mut prefix);
    c.write_data(&mut data, rows);
    (prefix, data)
}

fn names(prefix: &[u8]) -> Vec<String> {
    let mut r = &prefix[8..];
    let n = varint(&mut r).unwrap();
    (0..n)
        .map(|_| String::from_utf8(string(&mut r).unwrap().1.to_vec()).unwrap())
        .collect()
}

#[test]
fn type_names_are_what_the_engine_reads() {
    let json = [tag::JSON, 0, 0x80, 0x02, 16, 0, 0, 0];
    for (t, name) in [
        (&[tag::INT64][..], "Int64"),
        (&[tag::FLOAT64], "Float64"),
        (&[tag::STRING], "String"),
        (&[tag::BOOL], "Bool"),
        (
            &[tag::ARRAY, tag::NULLABLE, tag::BOOL],
            "Array(Nullable(Bool))",
        ),
        (&[tag::ARRAY, tag::DYNAMIC, 32], "Array(Dynamic)"),
        (
            &[tag::ARRAY, tag::DYNAMIC, 8],
            "Array(Dynamic(max_types=8))",
        ),
        (
            &[&[tag::ARRAY][..], &json].concat(),
            "Array(JSON(max_dynamic_types=16, max_dynamic_paths=256))",
        ),
    ] {
        let mut got = String::new();
        let mut r = t;
        put_type_name(&mut r, &mut got).unwrap();
        assert_eq!(got, name);
        assert!(r.is_empty());
        assert_eq!(type_len(t), Ok(t.len()));
    }
    // Typed or skipped paths are not something rows::json writes.
    assert_eq!(type_len(&[tag::JSON, 0, 0x80, 0x02, 16, 1]), Err(Malformed));
    assert_eq!(type_len(&[0x99]), Err(Malformed));
}

#[test]
fn nulls_and_types_get_discriminators_in_the_order_of_the_type_names() {
    let mut c = DynamicColumn::default();
    let mut s = Vec::new();
    put_str(&mut s, b"str");
    push(&mut c, &[tag::STRING], &s);
    push(&mut c, &[tag::NOTHING], &[]);
    push(&mut c, &[tag::INT64], &5i64.to_le_bytes());
    push(&mut c, &[tag::BOOL], &[1]);
    push(&mut c, &[tag::STRING], &s);
    // One more row, never pushed: NULL.
    let (prefix, data) = written(&c, 6);
    assert_eq!(names(&prefix), ["Bool", "Int64", "String"]);
    let mut want = vec![2, 3, 1, 0, 2, 3];
    want.push(1); // Bool's column
    want.extend_from_slice(&5i64.to_le_bytes());
    want.extend_from_slice(&s);
    want.extend_from_slice(&s);
    assert_eq!(data, want);
}

#[test]
fn nullable_elements_get_a_null_map_and_default_values() {
    // Array(Nullable(String)) ["a", null, "b"], then Array(Nullable(Float64)) [null, 2.5].
    let mut c = DynamicColumn::default();
    let mut strings = vec![3, 0];
    put_str(&mut strings, b"a");
    strings.push(1);
    strings.push(0);
    put_str(&mut strings, b"b");
    push(&mut c, &[tag::ARRAY, tag::NULLABLE, tag::STRING], &strings);
    let mut floats = vec![2, 1, 0];
    floats.extend_from_slice(&2.5f64.to_le_bytes());
    push(&mut c, &[tag::ARRAY, tag::NULLABLE, tag::FLOAT64], &floats);
    let (prefix, data) = written(&c, 2);
    assert_eq!(
        names(&prefix),
        ["Array(Nullable(Float64))", "Array(Nullable(String))"]
    );
    let mut want = vec![1, 0];
    want.extend_from_slice(&2u64.to_le_bytes());
    want.extend_from_slice(&[1, 0]);
    want.extend_from_slice(&0f64.to_le_bytes());
    want.extend_from_slice(&2.5f64.to_le_bytes());
    want.extend_from_slice(&3u64.to_le_bytes());
    want.extend_from_slice(&[0, 1, 0]);
    want.extend_from_slice(b"\x01a\x00\x01b");
    assert_eq!(data, want);
}

#[test]
fn past_255_types_discriminators_take_two_bytes() {
    // Array(Array(…(Nullable(Int64)))) at 256 depths: 256 types, NULL is 256.
    for (types, width) in [(255usize, 1usize), (256, 2)] {
        let mut c = DynamicColumn::default();
        for depth in 1..=types {
            let mut t = vec![tag::ARRAY; depth];
            t.extend_from_slice(&[tag::NULLABLE, tag::INT64]);
            push(&mut c, &t, &[0]);
        }
        push(&mut c, &[tag::NOTHING], &[]);
        let (prefix, data) = written(&c, types + 1);
        assert_eq!(names(&prefix).len(), types);
        // Discriminators, then each type's one offset (an empty array).
        assert_eq!(data.len(), (types + 1) * width + types * 8, "{types} types");
        let null = &data[types * width..(types + 1) * width];
        assert_eq!(null, &(types as u32).to_le_bytes()[..width]);
    }
}

#[test]
fn a_truncated_value_is_malformed() {
    let mut c = DynamicColumn::default();
    assert_eq!(c.push_value(&mut &[tag::INT64, 1, 2][..]), Err(Malformed));
    assert_eq!(
        c.push_value(&mut &[tag::STRING, 5, b'a'][..]),
        Err(Malformed)
    );
    assert_eq!(c.push_value(&mut &[tag::ARRAY][..]), Err(Malformed));
}

#[test]
fn rows_taken_back_drop_the_types_met_after_the_mark() {
    let mut c = DynamicColumn::default();
    push(&mut c, &[tag::INT64], &1i64.to_le_bytes());
    let before = written(&c, 1);
    let mut marks = Vec::new();
    c.mark(&mut marks);
    push(&mut c, &[tag::INT64], &2i64.to_le_bytes());
    push(&mut c, &[tag::BOOL], &[0]);
    c.rollback(&mut marks.iter().copied());
    assert_eq!(written(&c, 1), before);
}
