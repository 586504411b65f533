// Package nilness tells whether a value given as an interface is nil in
// effect: a constructor's typed nil (a nil *T returned as an interface)
// passes a comparison with nil, and panics at its first method.
package nilness

import "reflect"

// Is reports whether v is nil: a nil interface, or one holding a nil
// pointer, map, channel, func, slice or interface.
func Is(v any) bool {
	r := reflect.ValueOf(v)
	if !r.IsValid() {
		return true
	}
	switch r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.Interface, reflect.Slice, reflect.UnsafePointer:
		return r.IsNil()
	}
	return false
}
