package main

// An independent reimplementation of the rules PROCESSORS.md states, checked against the
// processors' real output on every vector that it covers: if the memo's description were
// wrong, the generator would fail instead of writing the file.

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
)

var modelChecks int

const maxAdjustedCount = uint64(1) << 56

// hex14 renders a 56-bit value as 14 lower-case hex digits.
func hex14(x uint64) string {
	s := strconv.FormatUint(x, 16)
	return strings.Repeat("0", 14-len(s)) + s
}

// tvalue is the th: encoding: 14 hex digits with trailing zeros removed; "0" for 0.
func tvalue(th uint64) string {
	if th == 0 {
		return "0"
	}
	return strings.TrimRight(hex14(th), "0")
}

// modelHashSeed: hash_seed mode, empty tracestate, no sampling.priority, fail_closed true.
func modelHashSeed(tid [16]byte, pct float32, seed uint32) (bool, string) {
	if tid == [16]byte{} {
		return false, "" // no randomness: error, fail closed
	}
	if pct > 100 {
		pct = 100
	}
	if pct == 0 {
		return false, ""
	}
	var f32scale float32 = 163.84 // 0x4000 / 100.0, applied in float32 then truncated
	scaled := uint32(pct * f32scale)
	if scaled == 0 {
		return false, ""
	}
	h := fnv.New32a()
	var le [4]byte
	binary.LittleEndian.PutUint32(le[:], seed)
	h.Write(le[:])
	h.Write(tid[:])
	h32 := h.Sum32()
	hashed := uint64(h32 & 0x3fff)
	if hashed >= uint64(scaled) {
		return false, ""
	}
	// The source calls this "unused18", but it shifts by 32-14 = 18: it is the hash's top 14
	// bits (bits 14..17 are never used), and the "mixed28" is 24 bits wide.
	top14 := uint64(h32 >> 18)
	mixed := top14 ^ (top14 << 10)
	rnd := (0x3fff-hashed)<<42 | mixed<<14 | hashed
	reject := uint64(0x4000-scaled) << 42
	return true, fmt.Sprintf("ot=rv:%s;th:%s", hex14(rnd), tvalue(reject))
}

// modelThreshold is ProbabilityToThresholdWithPrecision (pkg/sampling/probability.go).
func modelThreshold(fraction float64, precision int) uint64 {
	if precision == 0 {
		precision = 14
	}
	if fraction == 1 {
		return 0
	}
	_, expF := math.Frexp(fraction)
	_, expR := math.Frexp(1 - fraction)
	p := max(precision+expF/-4, precision+expR/-4) // Go integer division truncates toward zero
	p = min(14, p)
	scaled := uint64(math.Round(fraction * float64(maxAdjustedCount)))
	th := maxAdjustedCount - scaled
	if shift := 4 * (14 - p); shift != 0 {
		th += uint64(1) << (shift - 1)
		th >>= shift
		th <<= shift
	}
	return th
}

// modelConsistent: proportional (and equalizing) mode with an empty tracestate.
func modelConsistent(tid [16]byte, pct float32, precision int) (bool, string) {
	if tid == [16]byte{} {
		return false, ""
	}
	if pct > 100 {
		pct = 100
	}
	if pct == 0 {
		return false, ""
	}
	ratio := float64(pct) / 100
	if ratio < 1/float64(maxAdjustedCount) {
		ratio = 1 / float64(maxAdjustedCount)
	}
	th := modelThreshold(ratio, precision)
	rnd := binary.BigEndian.Uint64(tid[8:]) & (maxAdjustedCount - 1)
	if th > rnd {
		return false, ""
	}
	return true, "ot=th:" + tvalue(th)
}

func checkModel(r gridRun, tid [16]byte, kept bool, ts string) {
	var wantKept bool
	var wantTS string
	switch r.Model {
	case "hash_seed":
		wantKept, wantTS = modelHashSeed(tid, r.Pct, r.Seed)
	case "consistent":
		wantKept, wantTS = modelConsistent(tid, r.Pct, r.Precision)
	default:
		return
	}
	if wantKept != kept || wantTS != ts {
		fail("model disagrees with the processor on %q, trace id %s: processor kept=%v ts=%q, model kept=%v ts=%q",
			r.Name, hex.EncodeToString(tid[:]), kept, ts, wantKept, wantTS)
	}
	modelChecks++
}

// modelAttrHash is the attributes processor's hash action (coreinternal/attraction/hasher.go).
func modelAttrHash(v map[string]any) map[string]any {
	var sum [32]byte
	for typ, raw := range v {
		switch typ {
		case "str":
			sum = sha256.Sum256([]byte(raw.(string)))
		case "bool":
			b := byte(0)
			if raw.(bool) {
				b = 1
			}
			sum = sha256.Sum256([]byte{b})
		case "int":
			i, _ := strconv.ParseInt(raw.(string), 10, 64)
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(i))
			sum = sha256.Sum256(b[:])
		case "double":
			var d float64
			if raw.(string) == "-0" {
				d = math.Copysign(0, -1)
			} else {
				d, _ = strconv.ParseFloat(raw.(string), 64)
			}
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], math.Float64bits(d))
			sum = sha256.Sum256(b[:])
		default:
			return str("")
		}
	}
	return str(hex.EncodeToString(sum[:]))
}
