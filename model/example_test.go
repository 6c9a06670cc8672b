package model_test

import (
	"fmt"
	"log"

	"github.com/blockdiff/blockdiff/backend"
	"github.com/blockdiff/blockdiff/internal/demo"
	"github.com/blockdiff/blockdiff/model"
)

// A host-driven session: the prompt's blocks go into the cache, then a block is
// denoised against it (without writing) and committed.
func ExampleSession() {
	b, _, err := backend.New()
	if err != nil {
		log.Fatal(err)
	}
	m, err := demo.Model(b) // use model.Load for a checkpoint
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	var s *model.Session
	s, err = m.NewSession(64, 4)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	if _, err := s.Prefill([]int{demo.BOS, 'H', 'e', 'y'}); err != nil {
		log.Fatal(err)
	}
	block := []int{'!', demo.Mask, demo.Mask, demo.Mask}
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
