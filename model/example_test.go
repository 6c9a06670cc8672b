package model_test

import (
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/model"
)

// A host-driven session: the prompt's blocks go into the cache, then a block is
// denoised against it (without writing) and committed. The model is a tiny one with
// random weights; model.Load opens a checkpoint.
func ExampleSession() {
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	const bos, eos, mask = 256, 257, 258 // after the 256 byte tokens
	cfg := model.Config{
		Architecture: model.ArchLlama, VocabSize: 259, HiddenSize: 128, IntermediateSize: 256,
		NumLayers: 2, NumHeads: 4, NumKVHeads: 2, HeadDim: 32, MaxPositionEmbeddings: 4096,
		RMSNormEps: 1e-6, RopeTheta: 1e4, RopeAttentionFactor: 1, ScaleEmb: 1, DimModelBase: 128,
		BOSTokenID: bos, EOSTokenIDs: []int{eos}, MaskTokenID: mask,
	}
	m, err := model.NewRandom(b, cfg, model.DefaultDType(b), 1)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	s, err := m.NewSession(64, 4) // cache capacity 64, blocks of 4
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	if _, err := s.Prefill([]int{bos, 'H', 'e', 'y'}); err != nil {
		log.Fatal(err)
	}
	block := []int{'!', mask, mask, mask}
	logits, err := s.Step(block) // logits[i] predicts position i+1
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(logits), "rows of", len(logits[0]), "logits; cache holds", s.Len(), "positions")
	if _, err := s.Commit([]int{'!', ' ', 'y', 'o'}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after the commit:", s.Len())
	// Output:
	// 4 rows of 259 logits; cache holds 4 positions
	// after the commit: 8
}
