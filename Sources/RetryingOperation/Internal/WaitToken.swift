/// An object whose identity names one asynchronous wait (`ObjectIdentifier(token)`), so that
/// the waiting task's cancellation handler removes its own continuation from a list of
/// waiters and no other. Keep it alive until the wait is over, and the identifier cannot be
/// reused meanwhile.
///
/// ```swift
/// let token = WaitToken()
/// let id = ObjectIdentifier(token)
/// ```
package final class WaitToken: Sendable {
    /// Creates a token.
    package init() {}
}
