// Package clock stands for a worker's work time in benchmarks and live
// simulations: a sleep that wakes on time.
//
// Go's timers can fire up to a millisecond late when a process is
// otherwise idle: the runtime's poller waits for the next timer in whole
// milliseconds, rounding a 0.3 ms wait up to 1 ms. With many 1 ms jobs
// whose timers interleave, most sleeps overshoot, which would measure the
// runtime rather than the design. On Linux a Clock reads a timerfd through
// the poller, which the kernel wakes on time; elsewhere it is time.Sleep.
// (nanosleep(2) in the goroutine's thread is worse: a goroutine in a
// blocking syscall keeps its processor until the runtime's monitor takes
// it back.)
package clock
