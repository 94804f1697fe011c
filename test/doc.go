// Package test holds softnic's end-to-end tests across packages.
package test
