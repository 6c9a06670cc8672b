package modelcore

// public returns the implementation of a *model.Model. Package model wraps this
// package's Model and imports it, so it cannot be named here: model sets public when
// it initialises, and its siblings reach the implementation through [Of].
var public func(m any) *Model

// SetPublic is called by package model's init with the function [Of] runs.
func SetPublic(of func(m any) *Model) { public = of }

// Of returns the implementation of m, a *model.Model (nil when m is nil), for packages
// diffusion, quant and train, which take the public type and build on this one.
func Of(m any) *Model { return public(m) }
