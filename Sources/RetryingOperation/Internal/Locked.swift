import Foundation
#if canImport(Darwin)
import os
#elseif canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Mutable state that any thread may read or change, one caller at a time.
///
/// The one lock box of the package: every piece of shared mutable state lives in a
/// `Locked`, and is reached only through ``withLock(_:)``. Never call user code or post
/// KVO notifications from inside the closure.
///
/// The value and its lock share one heap allocation: a `ManagedBuffer` whose header is the
/// value and whose single element is the platform lock (`os_unfair_lock` on Apple
/// platforms, a `pthread_mutex_t` elsewhere). An `NSLock` would cost two more allocations
/// on Linux (the `NSLock` object and the mutex that Linux Foundation allocates for it), and
/// a class holding the value as a stored property adds a dynamic exclusivity check to every
/// access; every `RetryingOperation` creates one of these, so both showed in the throughput
/// benchmark. `Synchronization.Mutex` is not used because Thread Sanitizer reports false
/// races on it with this toolchain; it understands pthread mutexes.
///
/// `Locked` is a struct holding a reference: copies share the same value and lock.
///
/// ```swift
/// let counter = Locked(0)
/// counter.withLock { $0 += 1 }
/// ```
package struct Locked<Value: Sendable>: @unchecked Sendable {
    // @unchecked: `storage` (a `ManagedBuffer`, which the standard library marks as not
    // `Sendable`) is only reached through `withLock`, which holds its lock.
    private let storage: Storage

    /// Creates a lock box holding `value`.
    package init(_ value: consuming Value) {
        storage = Storage.make(holding: value)
    }

    /// Runs `body` with exclusive access to the value.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try storage.withUnsafeMutablePointers { value, lock in
            RawLock.lock(lock)
            defer { RawLock.unlock(lock) }
            return try body(&value.pointee)
        }
    }

    /// The value (header) and its lock (the one element), allocated together. The lock is
    /// initialised in place right after the allocation, never moved, and destroyed in
    /// `deinit`; `ManagedBuffer` destroys the header itself.
    private final class Storage: ManagedBuffer<Value, RawLock.Primitive> {
        static func make(holding value: consuming Value) -> Storage {
            // Moved, not copied, into the header: a copy of a large state struct followed by
            // the destruction of the original costs about as much as the allocation.
            var moving = Optional(value)
            let buffer = create(minimumCapacity: 1) { _ in moving.take()! }
            // `create` allocates an instance of the class it is called on.
            let storage = unsafeDowncast(buffer, to: Storage.self)
            storage.withUnsafeMutablePointerToElements { RawLock.initialize($0) }
            return storage
        }

        deinit {
            withUnsafeMutablePointerToElements { RawLock.destroy($0) }
        }
    }
}

/// The platform's plain mutual-exclusion lock, used in place (never copied once
/// initialised).
private enum RawLock {
    #if canImport(Darwin)
    typealias Primitive = os_unfair_lock

    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: os_unfair_lock())
    }

    static func destroy(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.deinitialize(count: 1)
    }

    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_lock(lock)
    }

    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        os_unfair_lock_unlock(lock)
    }
    #else
    typealias Primitive = pthread_mutex_t

    static func initialize(_ lock: UnsafeMutablePointer<Primitive>) {
        lock.initialize(to: pthread_mutex_t())
        let result = pthread_mutex_init(lock, nil)
        precondition(result == 0, "pthread_mutex_init failed with error \(result)")
    }

    static func destroy(_ lock: UnsafeMutablePointer<Primitive>) {
        let result = pthread_mutex_destroy(lock)
        precondition(result == 0, "pthread_mutex_destroy failed with error \(result)")
        lock.deinitialize(count: 1)
    }

    static func lock(_ lock: UnsafeMutablePointer<Primitive>) {
        let result = pthread_mutex_lock(lock)
        precondition(result == 0, "pthread_mutex_lock failed with error \(result)")
    }

    static func unlock(_ lock: UnsafeMutablePointer<Primitive>) {
        let result = pthread_mutex_unlock(lock)
        precondition(result == 0, "pthread_mutex_unlock failed with error \(result)")
    }
    #endif
}
