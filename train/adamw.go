package train

import (
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive
)

// AdamW holds the optimizer's constants. Weight decay is decoupled (Loshchilov and
// Hutter), applied as PyTorch's torch.optim.AdamW applies it, to the parameters that
// modelcore.Param.Decays marks.
type AdamW struct {
	Beta1, Beta2, Eps, WeightDecay float64
}

// DefaultAdamW is the zero AdamW's meaning in a [Config]: β 0.9 and 0.95, ε 1e-8,
// weight decay 0.1.
var DefaultAdamW = AdamW{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// update returns one parameter's new value and moments after a step: p, its gradient
// g, its moments m and v (all float32), the learning rate lr and the step number t
// (float32 scalars, t counted from 1), as PyTorch computes them:
//
//	p ← p·(1 − lr·wd)                  (decays only)
//	m ← β1·m + (1−β1)·g,  v ← β2·v + (1−β2)·g²
//	p ← p − lr/(1−β1ᵗ) · m / (√v/√(1−β2ᵗ) + ε)
func (a AdamW) update(p, g, m, v, lr, t *Node, decays bool) (p2, m2, v2 *Node) {
	gr := p.Graph()
	c := func(x float64) *Node { return Const(gr, float32(x)) }
	if decays && a.WeightDecay != 0 {
		p = Mul(p, Sub(c(1), Mul(lr, c(a.WeightDecay))))
	}
	m2 = Add(Mul(c(a.Beta1), m), Mul(c(1-a.Beta1), g))
	v2 = Add(Mul(c(a.Beta2), v), Mul(c(1-a.Beta2), Square(g)))
	bc1 := Sub(c(1), Pow(c(a.Beta1), t))
	bc2 := Sub(c(1), Pow(c(a.Beta2), t))
	denom := Add(Div(Sqrt(v2), Sqrt(bc2)), c(a.Eps))
	p2 = Sub(p, Mul(Div(lr, bc1), Div(m2, denom)))
	return p2, m2, v2
}
