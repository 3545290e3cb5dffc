package shed_test

import (
	"fmt"
	"log"

	"github.com/rebound-go/rebound/shed"
)

// A protocol without an interceptor of its own asks Admit before serving
// a request, and calls done when it ends; a rejected request gets the
// pushback to send back instead.
func ExampleShedder_Admit() {
	cfg := shed.DefaultConfig()
	cfg.InitialLimit, cfg.MinLimit, cfg.MaxLimit = 1, 1, 1 // one request at a time
	s, err := shed.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	done, _ := s.Admit()
	fmt.Println("first admitted:", done != nil)

	// Over the limit: rejected. Half the recent requests were shed, more
	// than RetryShare (a tenth), so the pushback says not to retry.
	second, pb := s.Admit()
	fmt.Println("second admitted:", second != nil, "; told to stop:", pb.Stop)

	done(false) // the first request ended, without a sign of overload
	third, _ := s.Admit()
	fmt.Println("third admitted:", third != nil)
	third(false)
	// Output:
	// first admitted: true
	// second admitted: false ; told to stop: true
	// third admitted: true
}
