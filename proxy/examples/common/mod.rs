pub mod alloc_meter;
