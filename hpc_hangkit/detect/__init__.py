"""Detection: the pure hang state machine and the polling loop that feeds it."""
