package provider_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/softnic/softnic/provider"
)

// TestNilReceivers calls every exported method of every verbs object
// type on a nil receiver, and on a zero value the application built itself
// (&provider.QP{}, never returned by a verb), with zero arguments: none
// panics; a method that returns an error returns an *OpError wrapping
// ErrClosed (as a destroyed object's methods do); one that returns none
// returns zero values (an fd method -1, "no fd"). The methods come from
// the types' method sets, so a method added without the check fails here.
func TestNilReceivers(t *testing.T) {
	errType := reflect.TypeOf((*error)(nil)).Elem()
	// Results of methods without an error that are not the zero value.
	special := map[string][]any{"CompChannel.Fd": {-1}}
	receivers := []struct {
		name  string
		types []any
	}{
		{"nil", []any{(*provider.Context)(nil), (*provider.PD)(nil), (*provider.MR)(nil), (*provider.CQ)(nil),
			(*provider.QP)(nil), (*provider.SRQ)(nil), (*provider.AH)(nil), (*provider.CompChannel)(nil)}},
		{"zero", []any{&provider.Context{}, &provider.PD{}, &provider.MR{}, &provider.CQ{},
			&provider.QP{}, &provider.SRQ{}, &provider.AH{}, &provider.CompChannel{}}},
	}
	n := 0
	for _, r := range receivers {
		for _, v := range r.types {
			rt := reflect.TypeOf(v)
			for i := 0; i < rt.NumMethod(); i++ {
				m := rt.Method(i)
				name := rt.Elem().Name() + "." + m.Name
				n++
				t.Run(r.name+"/"+name, func(t *testing.T) {
					args := []reflect.Value{reflect.ValueOf(v)}
					for j := 1; j < m.Type.NumIn(); j++ {
						args = append(args, reflect.Zero(m.Type.In(j)))
					}
					var out []reflect.Value
					func() {
						defer func() {
							if r := recover(); r != nil {
								t.Fatalf("panic on a nil receiver: %v", r)
							}
						}()
						if m.Type.IsVariadic() {
							out = m.Func.CallSlice(args)
						} else {
							out = m.Func.Call(args)
						}
					}()
					if k := m.Type.NumOut(); k > 0 && m.Type.Out(k-1) == errType {
						err, _ := out[k-1].Interface().(error)
						if !errors.Is(err, provider.ErrClosed) {
							t.Fatalf("error %v, want one wrapping ErrClosed", err)
						}
						var oe *provider.OpError
						if !errors.As(err, &oe) || oe.Op == "" {
							t.Fatalf("error %v is not an OpError naming the verb", err)
						}
						return
					}
					want := special[name]
					for j, o := range out {
						if want != nil {
							if got := fmt.Sprint(o.Interface()); got != fmt.Sprint(want[j]) {
								t.Fatalf("result %d is %s, want %v", j, got, want[j])
							}
							continue
						}
						if !o.IsZero() {
							t.Fatalf("result %d is %v, want the zero value", j, o.Interface())
						}
					}
				})
			}
		}
	}
	if n < 140 {
		t.Fatalf("only %d methods: the method sets were not all seen", n)
	}
}

// TestUverbsControlWithoutTransport calls every exported method of a
// UverbsControl that has no transport — nil, a zero value, or one made by
// NewUverbsControl(nil) — with zero arguments: none panics, and every
// error wraps ErrClosed (the error of a transport that is gone).
func TestUverbsControlWithoutTransport(t *testing.T) {
	errType := reflect.TypeOf((*error)(nil)).Elem()
	cases := []struct {
		name string
		u    *provider.UverbsControl
	}{
		{"nil", nil},
		{"zero", &provider.UverbsControl{}},
		{"nil_transport", provider.NewUverbsControl(nil)},
	}
	n := 0
	for _, c := range cases {
		rt := reflect.TypeOf(c.u)
		for i := 0; i < rt.NumMethod(); i++ {
			m := rt.Method(i)
			n++
			t.Run(c.name+"/"+m.Name, func(t *testing.T) {
				args := []reflect.Value{reflect.ValueOf(c.u)}
				for j := 1; j < m.Type.NumIn(); j++ {
					args = append(args, reflect.Zero(m.Type.In(j)))
				}
				var out []reflect.Value
				func() {
					defer func() {
						if r := recover(); r != nil {
							t.Fatalf("panic: %v", r)
						}
					}()
					out = m.Func.Call(args)
				}()
				if k := m.Type.NumOut(); k > 0 && m.Type.Out(k-1) == errType {
					err, _ := out[k-1].Interface().(error)
					if !errors.Is(err, provider.ErrClosed) {
						t.Fatalf("error %v, want one wrapping ErrClosed", err)
					}
				}
			})
		}
	}
	if n < 3*15 {
		t.Fatalf("only %d methods: the method set was not seen", n)
	}
}
