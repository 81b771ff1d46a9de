// Package controller holds the TrainingJob reconciler: one generic reconciler
// and a small adapter per training framework (PyTorch, TensorFlow, MPI, JAX,
// XGBoost, Paddle) that turns a job spec into pods and environment.
package controller
