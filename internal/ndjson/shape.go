package ndjson

// This file owns what the strict decoder knows of Go types: the fields of a struct target by
// JSON name (cached per type), the raw-member structs it fills without reflection per value,
// and the shapes it accepts for an interface target.

import (
	"reflect"
	"strings"
	"sync"
)

// Shapes of JSON value a Go type accepts.
const (
	shapeAny    = iota // json.RawMessage, interfaces, custom unmarshalers: only duplicates checked
	shapeObject        // a struct: declared members only
	shapeMap           // a map: any member names
	shapeArray
	shapeString
	shapeBool
	shapeNumber
	shapeOther // a type JSON cannot fill; encoding/json reports it
)

// typeInfo is what the walker needs to know about a Go type, computed once per type and linked
// to the typeInfo of its members, so a walk costs one cache lookup however deep the value.
type typeInfo struct {
	shape int
	// rawStruct marks a struct whose members are all json.RawMessage: Decode fills it from
	// the spans the walk found, without a second parse by encoding/json.
	rawStruct  bool
	index      map[string]int   // rawStruct: member name → field index
	order      []string         // rawStruct: member names by field index
	orderField []field          // rawStruct: fields by field index
	name       string           // for "expected …" messages
	fields     map[string]field // shapeObject: declared member names
	names      []string         // shapeObject: the same names, for case-folding checks
	elem       *typeInfo        // shapeMap, shapeArray
}

// field is a declared member: its type, and for a member of the struct itself (not of an
// embedded one) its field index.
type field struct {
	t     *typeInfo
	index int
}

// rawField is fields[name] for a raw struct. Peers write a message's members in the order of
// its fields, skipping absent ones, so the names from *next on are compared first, which is
// cheaper than hashing the name; *next moves past a match. A name out of that order falls back
// to the map.
func (ti *typeInfo) rawField(name []byte, next *int) (field, bool) {
	for i := *next; i < len(ti.order); i++ {
		if ti.order[i] == string(name) {
			*next = i + 1
			return ti.orderField[i], true
		}
	}
	fd, ok := ti.fields[string(name)]
	return fd, ok
}

// hasFold reports whether key matches a declared name under Unicode simple case folding, the
// rule encoding/json uses to match keys (so "ſ" matches "s" and "K", the Kelvin sign, "k").
func (ti *typeInfo) hasFold(key string) bool {
	for _, n := range ti.names {
		if strings.EqualFold(n, key) {
			return true
		}
	}
	return false
}

var typeCache sync.Map

func infoOf(t reflect.Type) *typeInfo {
	if ti, ok := typeCache.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := buildInfo(t, map[reflect.Type]*typeInfo{})
	actual, _ := typeCache.LoadOrStore(t, ti)
	return actual.(*typeInfo)
}

// buildInfo computes the typeInfo of t; building holds the types in progress, so that a
// recursive type links back to itself instead of recursing forever.
func buildInfo(t reflect.Type, building map[reflect.Type]*typeInfo) *typeInfo {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if ti := building[t]; ti != nil {
		return ti
	}
	ti := &typeInfo{}
	building[t] = ti
	switch {
	case t == rawMessageType || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType):
		ti.shape = shapeAny
	case t.Kind() == reflect.Struct:
		ti.shape, ti.name = shapeObject, "an object"
		ti.fields = map[string]field{}
		collectFields(t, ti, building)
		ti.index = rawStructIndex(t)
		ti.rawStruct = ti.index != nil
		if ti.rawStruct {
			ti.order, ti.orderField = make([]string, len(ti.index)), make([]field, len(ti.index))
			for name, i := range ti.index {
				ti.order[i], ti.orderField[i] = name, ti.fields[name]
			}
		}
	case t.Kind() == reflect.Map:
		ti.shape, ti.name = shapeMap, "an object"
		ti.elem = buildInfo(t.Elem(), building)
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		ti.shape, ti.name = shapeArray, "an array"
		ti.elem = buildInfo(t.Elem(), building)
	case t.Kind() == reflect.String:
		ti.shape, ti.name = shapeString, "a string"
	case t.Kind() == reflect.Bool:
		ti.shape, ti.name = shapeBool, "a boolean"
	case isNumberKind(t.Kind()):
		ti.shape, ti.name = shapeNumber, "a number"
	default:
		ti.shape, ti.name = shapeOther, t.String()
	}
	return ti
}

func collectFields(t reflect.Type, ti *typeInfo, building map[reflect.Type]*typeInfo) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				collectFields(ft, ti, building)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ti.fields[name] = field{t: buildInfo(f.Type, building), index: i}
		ti.names = append(ti.names, name)
	}
}

// maxRawFields bounds the fields of a raw struct, whose spans the walker holds in an array.
const maxRawFields = 24

// rawStructIndex maps the JSON names of t's fields to their indexes when every field is an
// exported, plainly tagged json.RawMessage and there are at most maxRawFields of them;
// otherwise it returns nil.
func rawStructIndex(t reflect.Type) map[string]int {
	if t.NumField() > maxRawFields {
		return nil
	}
	index := make(map[string]int, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Type != rawMessageType || !f.IsExported() || f.Anonymous || name == "" || name == "-" || opts != "" {
			return nil
		}
		index[name] = i
	}
	return index
}

// fillRaw sets the members of a raw struct from their spans in data, which they share: Decode
// passes its own copy, so that they stay valid after the caller reuses its buffer.
func fillRaw(v reflect.Value, data []byte, spans [][2]int) {
	v.SetZero()
	for i, sp := range spans {
		if sp[1] > 0 {
			v.Field(i).SetBytes(data[sp[0]:sp[1]:sp[1]])
		}
	}
}
